"""The split and the samples: repository-disjoint, exact sizes, every stratum within one task of its target."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from codedojo.data.balance import apportion, max_deviation, target_weights
from codedojo.data.rows import repository, stratum
from codedojo.data.sample import sample_dataset, sample_rows
from codedojo.data.split import SplitError, split_dataset, split_rows
from data_support import synthetic_row

LANGUAGES = ("python", "go", "ts", "rust")
DIFFICULTIES = ("easy", "medium", "hard")


def _pool(seed: int, *, num_repos: int = 40) -> list[dict]:
    """Repositories of 1-12 tasks, each mostly one language, difficulties mixed: shaped like SWE-rebench."""
    rng = random.Random(seed)
    rows = []
    for r in range(num_repos):
        main_language = rng.choice(LANGUAGES)
        for t in range(rng.randint(1, 12)):
            lang = main_language if rng.random() < 0.9 else rng.choice(LANGUAGES)
            rows.append(synthetic_row(f"r{r}-t{t}", repository=f"org/repo{r}", language=lang,
                                      difficulty=rng.choice(DIFFICULTIES)))
    return rows


def _within_tolerance(chosen: list[dict], *, size: int, weights: dict) -> bool:
    counts = Counter(stratum(r) for r in chosen)
    return all(abs(counts.get(s, 0) - size * w) <= 1 for s, w in weights.items())


@pytest.mark.parametrize("seed", range(12))
def test_split_is_repository_disjoint_exact_and_balanced(seed: int) -> None:
    rows = _pool(seed)
    eval_size = len(rows) // 5
    result = split_rows(rows, eval_size=eval_size, seed=seed)
    eval_repos = {repository(r) for r in result.eval_rows}
    train_repos = {repository(r) for r in result.train_rows}
    assert not eval_repos & train_repos
    assert eval_repos <= set(result.eval_repositories)
    assert len(result.eval_rows) == eval_size
    assert len(result.train_rows) + len(result.eval_rows) + result.unused == len(rows)
    weights = target_weights(rows, balance="proportional")
    assert _within_tolerance(result.eval_rows, size=eval_size, weights=weights)
    assert max_deviation(result.eval_balance) <= 1
    # Every stratum keeps training tasks, and train-N samples meet the same tolerance.
    assert {stratum(r) for r in result.train_rows} == set(weights)
    sample = sample_rows(result.train_rows, size=50, seed=seed)
    assert len(sample) == 50
    assert _within_tolerance(sample, size=50, weights=target_weights(result.train_rows, balance="proportional"))


def test_equal_balance_and_the_largest_remainder_rule() -> None:
    assert apportion(7, {("a", "x"): 1 / 3, ("b", "x"): 1 / 3, ("c", "y"): 1 / 3}) == {
        ("a", "x"): 3, ("b", "x"): 2, ("c", "y"): 2}
    # A stratum short of tasks gets all it has; its share goes to the others.
    assert apportion(10, {("a", "x"): 0.5, ("b", "x"): 0.5}, caps={("a", "x"): 2, ("b", "x"): 30}) == {
        ("a", "x"): 2, ("b", "x"): 8}
    rows = _pool(3)
    result = split_rows(rows, eval_size=24, seed=3, balance="equal")
    counts = Counter(stratum(r) for r in result.eval_rows)
    assert len(result.eval_rows) == 24 and max(counts.values()) - min(counts.values()) <= 1


def test_a_stratum_in_one_repository_stays_in_training_and_the_report_says_so() -> None:
    rows = [synthetic_row(f"p{r}-{t}", repository=f"py{r}", language="python", difficulty="easy")
            for r in range(6) for t in range(5)]
    rows += [synthetic_row(f"c-{t}", repository="only-c", language="c", difficulty="easy") for t in range(10)]
    result = split_rows(rows, eval_size=8, seed=0)
    assert "only-c" not in result.eval_repositories  # moving it would leave no C task to train on
    assert len(result.eval_rows) == 8 and {stratum(r) for r in result.eval_rows} == {("python", "easy")}
    short = [line for line in result.eval_balance if line.count < int(line.target)]
    assert [line.stratum for line in short] == [("c", "easy")]


def test_split_is_deterministic_from_the_seed() -> None:
    rows = _pool(5)
    a = split_rows(rows, eval_size=30, seed=1)
    b = split_rows(list(rows), eval_size=30, seed=1)
    assert [r["label"] for r in a.eval_rows] == [r["label"] for r in b.eval_rows]
    others = {tuple(r["label"] for r in split_rows(rows, eval_size=30, seed=s).eval_rows) for s in range(2, 8)}
    assert len(others) > 1


def test_bad_requests_name_the_fix() -> None:
    rows = [synthetic_row(f"t{i}", repository="one", language="python", difficulty="easy") for i in range(5)]
    with pytest.raises(SplitError, match="at least 2 repositories"):
        split_rows(rows, eval_size=2)
    rows += [synthetic_row("u", repository="two", language="python", difficulty="easy")]
    with pytest.raises(SplitError, match="between 1 and 5"):
        split_rows(rows, eval_size=6)


def test_split_and_sample_write_rows_and_provenance(tmp_path: Path) -> None:
    source = tmp_path / "validated.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in _pool(7)))
    report = split_dataset(source, eval_fraction=0.2, seed=7)
    assert "max |count - target|" in report.text()
    sample = sample_dataset(report.train_path, size=10, seed=7)
    assert sample.path.name == "train-10.jsonl"
    for name in ("eval", "train-full", "train-10"):
        record = json.loads((tmp_path / f"{name}.provenance.json").read_text())
        assert record["inputs"][0]["sha256"] and record["seed"] == 7 and record["codedojo_version"]
        assert record["output_sha256"] and record["created_at"]
    assert json.loads((tmp_path / "eval.provenance.json").read_text())["inputs"][0]["path"] == str(source)


def test_the_cli_splits_and_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from codedojo.cli import main

    source = tmp_path / "validated.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in _pool(2)))
    assert main(["dataset", "split", "--input", str(source), "--eval-size", "12", "--seed", "3"]) == 0
    assert "eval: 12 tasks" in capsys.readouterr().out
    assert main(["dataset", "sample", "--input", str(tmp_path / "eval.jsonl"), "--size", "4"]) == 0
    assert len((tmp_path / "eval-4.jsonl").read_text().splitlines()) == 4
    assert main(["dataset", "sample", "--input", str(tmp_path / "eval.jsonl"), "--size", "40"]) == 2
    assert "between 1 and 12" in capsys.readouterr().err

"""Split: repository-disjoint train and eval sets, balanced by language and difficulty, sized in tasks.

1. Each stratum's share of the eval set is its weight (its share of the input, or equal shares), and
   its quota is apportioned from the eval size (codedojo.data.balance).
2. Whole repositories move to the eval side, greedily: each time the one that covers the most of the
   remaining per-stratum quota (then the smaller one, keeping more for training and spreading eval over
   more repositories; then the seeded order), never one whose move would leave a stratum without a
   training repository. Repositories that turn out unnecessary are moved back.
3. eval.jsonl takes exactly `eval_size` tasks of the eval repositories, per stratum quota, round-robin
   over the repositories; the eval repositories' other tasks are left out of both sets, so no
   repository is on both sides. train-full.jsonl is every task of the other repositories.

Everything is a function of the input rows and the seed. The balance guarantee is stated in
codedojo.data.balance; the printed report shows the target, the count and the pool of every stratum.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from codedojo.data.balance import Balance, StratumLine, apportion, balance_lines, format_lines, max_deviation, pick
from codedojo.data.balance import target_weights as _weights
from codedojo.data.provenance import describe_input, write_provenance
from codedojo.data.rows import Row, Stratum, load_rows, repository, save_rows, stratum

EVAL = "eval.jsonl"
TRAIN_FULL = "train-full.jsonl"


class SplitError(ValueError):
    """The requested split cannot be made; the message says why and what to change."""


@dataclass(frozen=True, kw_only=True)
class SplitResult:
    eval_rows: list[Row]
    train_rows: list[Row]
    eval_repositories: tuple[str, ...]
    train_repositories: tuple[str, ...]
    unused: int
    """Tasks of eval repositories not in eval.jsonl (kept out of training too)."""
    eval_balance: list[StratumLine]
    train_balance: list[StratumLine]
    """train-full against the same weights, scaled to its size (informative: the pool is not trimmed)."""


@dataclass(frozen=True, kw_only=True)
class SplitReport:
    result: SplitResult
    eval_path: Path
    train_path: Path

    def text(self) -> str:
        r = self.result
        lines = [
            f"eval: {len(r.eval_rows)} tasks from {len(r.eval_repositories)} repositories "
            f"({', '.join(r.eval_repositories)}) -> {self.eval_path}",
            f"train-full: {len(r.train_rows)} tasks from {len(r.train_repositories)} repositories -> {self.train_path}",
            f"left out: {r.unused} tasks of eval repositories (no repository is on both sides)",
            format_lines(r.eval_balance, title="eval balance (target = eval size x weight):"),
            f"  max |count - target| = {max_deviation(r.eval_balance):.2f} (guaranteed <= 1 unless a stratum is "
            "marked short)",
            format_lines(r.train_balance, title="train-full balance (target = its size x weight):"),
        ]
        return "\n".join(lines)


def choose_eval_repositories(rows: Sequence[Row], *, quotas: dict[Stratum, int], size: int,
                             seed: int) -> list[str]:
    """Repositories for the eval side (see the module docstring, step 2)."""
    per_repo: dict[str, Counter[Stratum]] = {}
    for row in rows:
        per_repo.setdefault(repository(row), Counter())[stratum(row)] += 1
    order = sorted(per_repo)
    random.Random(seed).shuffle(order)
    rank = {repo: i for i, repo in enumerate(order)}
    train_repos_with = Counter(s for counts in per_repo.values() for s in counts)
    sizes = {repo: sum(counts.values()) for repo, counts in per_repo.items()}
    have: Counter[Stratum] = Counter()
    chosen: list[str] = []

    def satisfied() -> bool:
        return sum(have.values()) >= size and all(have[s] >= q for s, q in quotas.items())

    while not satisfied():
        best, best_key = None, None
        for repo in order:
            counts = per_repo[repo]
            if any(train_repos_with[s] <= 1 for s in counts):
                continue  # its move would leave some stratum with no training repository
            # How much of the remaining per-stratum quota the repository covers (the quotas sum to `size`).
            covered = sum(min(c, max(0, quotas.get(s, 0) - have[s])) for s, c in counts.items())
            if covered == 0:
                continue
            key = (covered, -sizes[repo], -rank[repo])
            if best_key is None or key > best_key:
                best, best_key = repo, key
        if best is None:
            break
        chosen.append(best)
        order.remove(best)
        have.update(per_repo[best])
        for s in per_repo[best]:
            train_repos_with[s] -= 1
    if satisfied():
        for repo in reversed(list(chosen)):  # move back what the others already cover
            have.subtract(per_repo[repo])
            if satisfied():
                chosen.remove(repo)
            else:
                have.update(per_repo[repo])
    return sorted(chosen)


def split_rows(rows: Sequence[Row], *, eval_size: int, seed: int = 0,
               balance: Balance = "proportional") -> SplitResult:
    """The split of `rows` (see the module docstring)."""
    repos = sorted({repository(r) for r in rows})
    if len(repos) < 2:
        raise SplitError(f"a repository-disjoint split needs tasks from at least 2 repositories, got {len(repos)}")
    if not 0 < eval_size < len(rows):
        raise SplitError(f"eval size must be between 1 and {len(rows) - 1} (the input has {len(rows)} tasks), "
                         f"got {eval_size}")
    weights = _weights(rows, balance=balance)
    eval_repos = choose_eval_repositories(rows, quotas=apportion(eval_size, weights), size=eval_size, seed=seed)
    on_eval_side = set(eval_repos)
    pool = [r for r in rows if repository(r) in on_eval_side]
    train = [r for r in rows if repository(r) not in on_eval_side]
    if len(pool) < eval_size:
        raise SplitError(f"only {len(pool)} tasks can go to eval without leaving a stratum with no training "
                         f"repository; lower the eval size below {len(pool) + 1}")
    caps = Counter(stratum(r) for r in pool)
    eval_rows = pick(pool, apportion(eval_size, weights, caps=caps), rng=random.Random(seed))
    eval_rows.sort(key=_order)
    train.sort(key=_order)
    return SplitResult(
        eval_rows=eval_rows, train_rows=train, eval_repositories=tuple(eval_repos),
        train_repositories=tuple(sorted({repository(r) for r in train})), unused=len(pool) - len(eval_rows),
        eval_balance=balance_lines(eval_rows, pool, size=eval_size, weights=weights),
        train_balance=balance_lines(train, train, size=len(train), weights=weights),
    )


def _order(row: Row) -> tuple[str, str]:
    return (repository(row), str(row.get("label")))


def split_dataset(source: Path, *, eval_size: int | None = None, eval_fraction: float = 0.2, seed: int = 0,
                  balance: Balance = "proportional") -> SplitReport:
    """Split the rows of `source` into eval.jsonl and train-full.jsonl beside it, with provenance."""
    source = Path(source)
    rows = load_rows(source)
    if eval_size is None:
        if not 0 < eval_fraction < 1:
            raise SplitError(f"eval fraction must be between 0 and 1, got {eval_fraction}")
        eval_size = max(1, round(eval_fraction * len(rows)))
    result = split_rows(rows, eval_size=eval_size, seed=seed, balance=balance)
    eval_path = save_rows(source.with_name(EVAL), result.eval_rows)
    train_path = save_rows(source.with_name(TRAIN_FULL), result.train_rows)
    settings = {"eval_size": eval_size, "balance": balance, "tolerance": "|count - target| <= 1 per stratum"}
    for path, side, lines in ((eval_path, "eval", result.eval_balance), (train_path, "train", result.train_balance)):
        write_provenance(path, stage="split", inputs=[describe_input(source)], seed=seed, settings=settings, counts={
            "tasks": len(result.eval_rows if side == "eval" else result.train_rows),
            "eval_repositories": list(result.eval_repositories),
            "train_repositories": list(result.train_repositories),
            "left_out_of_both": result.unused,
            "strata": {f"{line.stratum[0]}/{line.stratum[1]}": {"target": round(line.target, 3), "count": line.count}
                       for line in lines},
        })
    return SplitReport(result=result, eval_path=eval_path, train_path=train_path)

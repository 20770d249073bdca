"""`codedojo report`: the HTML page renders its curves and episode browser in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from codedojo.train.report import write_report


def _fake_run(run_dir: Path) -> None:
    (run_dir / "episodes").mkdir(parents=True)
    records = []
    for step in range(3):
        records.append({"step": step, "kind": "train", "rollout/reward_mean": 0.1 * step,
                        "rollout/solved_frac": 0.1 * step, "train/loss": -0.01 * step, "rollout/turns_mean": 3.0,
                        "perf/step_seconds": 10.0,
                        "train/train_rollout_logprob_abs_diff": 1e-5})
        with (run_dir / "episodes" / f"step_{step + 1:06d}.jsonl").open("w") as f:
            for i in range(2):
                f.write(json.dumps({"step": step + 1, "task": f"task-{i}", "sample": 0,
                                    "status": "submitted" if i else "step_limit", "reward": float(i), "turns": 2,
                                    "error": None, "messages": [{"role": "user", "content": f"fix bug {i} <b>"},
                                                                {"role": "assistant", "content": "```bash\nls\n```"}]})
                        + "\n")
    records.insert(0, {"step": 0, "kind": "eval", "eval/held-out/pass@1": 0.1, "eval/held-out/pass@1_stderr": 0.05})
    records.append({"step": 3, "kind": "eval", "eval/held-out/pass@1": 0.25, "eval/held-out/pass@1_stderr": 0.1})
    (run_dir / "learning.json").write_text(json.dumps({
        "train_reward": [0.1, 0.2, 0.3], "mixed_group_frac": [0.5, 0.5, 1.0],
        "eval": {"held-out": {"before": {"step": 0, "pass@1": 0.1, "stderr": 0.05},
                              "after": {"step": 3, "pass@1": 0.25, "stderr": 0.1},
                              "gain": {"mean": 0.15, "stderr": 0.04, "tasks": 8}}}}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "config.json").write_text(json.dumps({"training_run_id": "run-x", "model": "tiny", "tasks": 2,
                                                     "derived": {"clip bounds": "[0.8, 1.28]"}}))


def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    _fake_run(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "codedojo.cli", "report", str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "report.html"
    assert page.is_file()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is installed by ./dev (apt-get install chromium)"
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout
    # rows and the conversation are created by the page's script, so their presence proves it ran
    assert dom.count('class="episode-row"') == 6
    assert '<span id="episode-count">6</span>' in dom
    assert "fix bug 0 &lt;b&gt;" in dom  # message text is escaped, not injected
    assert dom.count("<svg") >= 5 and "eval pass@1" in dom
    # one per evaluation, from pass@1_stderr, on the eval curve and on the before/after bars
    assert dom.count('class="errorbar"') == 4 and dom.count('class="bar"') == 2
    assert "gain +0.150 +- 0.040 (paired over 8 tasks): beyond noise (3.8 standard errors, a gain)" in dom


def test_report_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "codedojo.cli", "report", str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr


def test_write_report_without_episodes(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "kind": "train", "rollout/reward_mean": 0.5}) + "\n")
    assert "No metrics yet" not in write_report(tmp_path).read_text()


def test_every_committed_result_file_is_valid_json() -> None:
    """docs/results/*.json are what the docs cite: each must load (a bench once wrote a library's start-up banner
    into one)."""
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    files = sorted(results.rglob("*.json"))
    assert len(files) >= 10
    for path in files:
        try:
            json.loads(path.read_text())
        except ValueError as error:
            raise AssertionError(f"{path.relative_to(results)} is not valid JSON: {error}") from error


def test_the_gain_is_called_beyond_or_within_noise_by_two_standard_errors() -> None:
    from codedojo.train.report import noise_words

    assert noise_words(0.15, 0.04).startswith("beyond noise (3.8 standard errors, a gain")
    assert noise_words(-0.15, 0.05).startswith("beyond noise (3.0 standard errors, a loss")
    assert noise_words(0.125, 0.227).startswith("within noise (0.6 standard errors")
    assert noise_words(0.1, 0.05).startswith("within noise")  # exactly 2: not beyond
    assert noise_words(0.0, 0.0) == "no spread to judge it by"
    assert noise_words(None, None).startswith("no standard error")


def test_the_page_shows_base_start_and_trained_with_error_bars(tmp_path: Path) -> None:
    """With a baseline, "What it learned" draws one bar per stage with +- one standard error, and lists each
    paired difference with its words."""
    _fake_run(tmp_path)
    learning = json.loads((tmp_path / "learning.json").read_text())
    entry = learning["eval"]["held-out"]
    entry["baseline"] = {"model": "smollm2-135m-instruct", "pass@1": 0.05, "stderr": 0.03}
    entry["before_vs_baseline"] = {"mean": 0.05, "stderr": 0.04, "tasks": 8}
    entry["after_vs_baseline"] = {"mean": 0.2, "stderr": 0.05, "tasks": 8}
    learning["stage_names"] = ["base", "after SFT", "after GRPO"]
    (tmp_path / "learning.json").write_text(json.dumps(learning))
    page = write_report(tmp_path).read_text()
    chart = page[page.index("held-out: pass@1 (bars"):]
    chart = chart[:chart.index("</svg>")]
    assert chart.count('class="bar"') == 3 and chart.count('class="errorbar"') == 3
    assert [label in chart for label in (">base<", ">after SFT<", ">after GRPO<")] == [True] * 3
    assert "base (smollm2-135m-instruct): 0.050 +- 0.030" in page
    assert "after GRPO - base: +0.200 +- 0.050 (paired over 8 tasks): beyond noise (4.0 standard errors" in page
    assert "after SFT - base: +0.050 +- 0.040 (paired over 8 tasks): within noise" in page
    assert "the gain, after GRPO - after SFT: +0.150 +- 0.040" in page

"""bench/paired_eval.py against hand-computed figures on three tasks."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def report(path: Path, solved: dict[str, int]) -> Path:
    path.write_text(json.dumps({"per_task": [{"task": t, "samples": 2, "solved": c} for t, c in solved.items()]}))
    return path


def test_paired_figures_by_hand(tmp_path: Path) -> None:
    before = report(tmp_path / "a.json", {"alpha-1": 0, "alpha-2": 1, "beta-1": 2})
    after = report(tmp_path / "b.json", {"alpha-1": 2, "alpha-2": 1, "beta-1": 1})
    out = json.loads(subprocess.run([sys.executable, str(ROOT / "bench" / "paired_eval.py"), str(before), str(after)],
                                    capture_output=True, text=True, check=True).stdout)
    # differences 1, 0, -0.5: mean 1/6, sample variance ((5/6)^2 + (1/6)^2 + (2/3)^2) / 2 = 7/12
    assert out["difference"]["mean"] == 1 / 6 and math.isclose(out["variance_of_differences"], 7 / 12)
    assert math.isclose(out["difference"]["stderr"], math.sqrt(7 / 12 / 3))
    assert (out["tasks_up"], out["tasks_down"]) == (1, 1)
    # noise per task c(n-c)/(n(n-1))/n: 1/2/2 = 0.25 for a 1-of-2 task, else 0; summed per task: 0, 0.5, 0.25
    assert math.isclose(out["sampling_noise"], 0.25) and math.isclose(out["true_spread"], 7 / 12 - 0.25)
    assert math.isclose(out["projected_stderr"]["4"], math.sqrt((7 / 12 - 0.25 + 0.25 / 2) / 3))
    assert out["solved_by_repository"] == {"alpha": {"before": 1, "after": 3, "episodes": 4},
                                           "beta": {"before": 2, "after": 1, "episodes": 2}}

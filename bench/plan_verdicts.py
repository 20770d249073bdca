"""The fourth registered plan's figures and hypotheses from whatever evaluations have landed, without running
anything (bench/learning.py writes the same at the end of a full run; a plan run one arm per session needs them
sooner):

    .venv/bin/python bench/plan_verdicts.py docs/results/learning4 [--json out.json]

Reads every eval_<arm>_<tier>.json of the plan in the folder and prints, with bench/learning.py's own functions
(`figures`, `difference`, `verdicts`), each evaluation's pass@1 and standard error, the plan's paired differences
whose two sides are both there (standard error over tasks and clustered by repository), and each hypothesis
whose figures are all there. A hypothesis still missing an evaluation is listed as pending.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def plan_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_learning_verdicts", Path(__file__).parent / "learning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_learning_verdicts"] = module
    spec.loader.exec_module(module)
    return module


def verdicts_of(folder: Path) -> dict[str, Any]:
    plan = plan_module()
    results = {f"{arm}/{tier}": json.loads((folder / f"eval_{arm}_{tier}.json").read_text())
               for arm, tier in plan.EVALS if (folder / f"eval_{arm}_{tier}.json").is_file()}
    if not results:
        raise SystemExit(f"{folder}: no evaluation of the plan in it (eval_<arm>_<tier>.json)")
    hypotheses = plan.verdicts(results)
    return {"folder": str(folder), "results": {key: plan.figures(r) for key, r in results.items()},
            "differences": {f"{after}-vs-{before}": plan.difference(results[before], results[after])
                            for before, after in plan.DIFFERENCES if before in results and after in results},
            "hypotheses": hypotheses, "pending": sorted(set(plan.HYPOTHESES) - set(hypotheses))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder of the plan's eval_<arm>_<tier>.json")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    out = verdicts_of(args.folder)
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

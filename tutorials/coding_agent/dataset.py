"""Prepare tasks and train/eval subsets for the coding-agent tutorial.

Run from the repository root:

    python -m tutorials.coding_agent.dataset --smoke        # minutes on a 2-core CPU
    python -m tutorials.coding_agent.dataset                # prepare, probe train-300, mixed subset
    python -m tutorials.coding_agent.dataset prepare        # ingest, validate, split and sample only
    python -m tutorials.coding_agent.dataset warm           # bundled tasks: demonstrations + SFT on train-full
    python -m tutorials.coding_agent.dataset probe          # n episodes per task of the probe subset
    python -m tutorials.coding_agent.dataset mixed          # keep its tasks with 0 < successes < n

By default the tasks are codedojo's bundled suite, checked in local sandboxes and probed with
SmolLM2-135M-Instruct after a warm start made as the embedded default makes its own (the scripted expert's
demonstrations on this root's training pool, then supervised fine-tuning: the base model solves next to
nothing, docs/training.md), on the guided tier in --smoke. `--source swe-rebench` converts SWE-rebench V2
rows instead (their tasks run on prebuilt images: use `--sandbox docker` or `--sandbox modal`), and
`--source folder --folder DIR` takes any folder of Harbor tasks. Every stage resumes where it stopped when
rerun; docs/dataset.md lists the files.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tutorials.coding_agent.main import DATA_DIR, DATASET_ROOTS, make_recipe

# The reference tutorial's training script imports its cluster settings from this module; they are
# defined in main.py (which never imports this one) and re-exported here under the same names.
from tutorials.coding_agent.main import DATA_VOLUME_NAME as DATA_VOLUME_NAME
from tutorials.coding_agent.main import SLIME_GIT_REPOSITORY as SLIME_GIT_REPOSITORY
from tutorials.coding_agent.main import SLIME_GIT_REVISION as SLIME_GIT_REVISION

SPLIT_SEED = 0
TRAIN_SPLIT_SIZES = (4, 100, 300, 1000)
EVAL_SPLIT_FRACTION = 0.2
# The bundled suite has 12 repositories of 30 tasks: 15% puts two repositories in eval (54 of their 60
# tasks) and leaves exactly 300 for training.
EVAL_SPLIT_FRACTIONS = {"builtin": 0.15}
EVAL_SPLIT_SIZES = (4,)
PROBE_SUBSET = "train-300"
PROBE_SAMPLES = 8
MIN_GRADE = "A"

HF_DATASET = "nebius/SWE-rebench-V2"


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """How much the pipeline does: the full tutorial, or a run that fits a 2-core CPU (--smoke)."""

    tier: str | None
    limit: int | None
    train_sizes: tuple[int, ...]
    eval_sizes: tuple[int, ...]
    probe_subset: str
    n: int
    smoke: bool
    """Probe with the smoke recipe's agent budgets (main.make_recipe(smoke=True))."""


FULL = Sizes(tier=None, limit=None, train_sizes=TRAIN_SPLIT_SIZES, eval_sizes=EVAL_SPLIT_SIZES,
             probe_subset=PROBE_SUBSET, n=PROBE_SAMPLES, smoke=False)
SMOKE = Sizes(tier="guided", limit=24, train_sizes=(4, 8), eval_sizes=(4,), probe_subset="train-8", n=4, smoke=True)


def prepare(root: Path, *, source: str, sizes: Sizes, rows: str = HF_DATASET, folder: Path | None = None,
            min_grade: str | None = MIN_GRADE, validate: bool = True, sandbox: str = "local", workers: int = 2,
            seed: int = SPLIT_SEED) -> dict[str, int]:
    """Ingest, prefilter, validate, split and sample into `root`; returns the size of every subset written."""
    from codedojo.data.ingest import ingest_builtin, ingest_folder, ingest_swerebench
    from codedojo.data.prefilter import Criteria, prefilter
    from codedojo.data.sample import sample_dataset
    from codedojo.data.split import split_dataset
    from codedojo.data.validation import validate_tasks

    if source == "builtin":
        rows_path = ingest_builtin(root=root, tier=sizes.tier, limit=sizes.limit, seed=seed, workers=workers)
    elif source == "folder":
        if folder is None:
            raise ValueError("--source folder needs --folder DIR (a folder of Harbor task directories)")
        rows_path = ingest_folder(folder, root=root)
    else:
        rows_path = ingest_swerebench(rows, root=root, limit=sizes.limit)
        if min_grade:
            rows_path, _ = prefilter(rows_path, output=root / "prefiltered.jsonl",
                                     criteria=Criteria(min_grade=min_grade))
    if validate:
        rows_path = asyncio.run(validate_tasks(rows_path, output=root / "validated.jsonl", workers=workers,
                                               backend=sandbox))
    split = split_dataset(rows_path, eval_fraction=EVAL_SPLIT_FRACTIONS.get(source, EVAL_SPLIT_FRACTION), seed=seed)
    print(split.text())
    counts = {"eval": len(split.result.eval_rows), "train-full": len(split.result.train_rows)}
    for prefix, pool, subset_sizes in (("eval", split.eval_path, sizes.eval_sizes),
                                       ("train", split.train_path, sizes.train_sizes)):
        available = counts[pool.name.removesuffix(".jsonl")]
        for size in subset_sizes:
            if size > available:
                (root / f"{prefix}-{size}.jsonl").unlink(missing_ok=True)
                print(f"skipping {prefix}-{size}: only {available} {prefix} tasks")
                continue
            counts[f"{prefix}-{size}"] = len(sample_dataset(pool, size=size, seed=seed).rows)
    return counts


WARM_START = "warm-start.json"
"""Written by the warm step beside the subsets: the fine-tuned model the probe and main.py start from."""


def warm(root: Path, *, sizes: Sizes, model: str, device: str | None = None) -> Path:
    """A warm start made as the embedded default's, on this root's training pool (train-full, which the split keeps
    repository-disjoint from eval): the scripted expert's demonstrations under the local recipe's budget, then
    SFT with the embedded default's settings, cached (codedojo.train.default.warm_start). Records the model in
    <root>/warm-start.json and returns its folder. Only bundled tasks have an expert."""
    import json

    from rich.console import Console

    from codedojo.agent.budget import recipe_budget
    from codedojo.agent.engines import profile_for
    from codedojo.config import AgentTaskDataset
    from codedojo.precision import default_device
    from codedojo.tasks.task import Task
    from codedojo.train.default import SFT_BATCH, SFT_EPOCHS, SFT_LR, warm_start
    from codedojo.train.sft import SFTConfig

    tasks = [Task.load(path) for path in AgentTaskDataset(root / "train-full.jsonl").task_paths()]
    budget = recipe_budget(probe_recipe(smoke=sizes.smoke), profile=profile_for(model))
    folder = warm_start(model=model, tasks=tasks, sft_config=SFTConfig(epochs=SFT_EPOCHS, lr=SFT_LR,
                        batch_sequences=SFT_BATCH), budget=budget, device=device or default_device(),
                        console=Console(stderr=True))
    (root / WARM_START).write_text(json.dumps({"model": str(folder), "base": model, "tasks": len(tasks)}, indent=2))
    return folder


def warm_model(root: Path) -> Path | None:
    """The warm step's model for this root, if it ran."""
    import json

    path = root / WARM_START
    return Path(json.loads(path.read_text())["model"]) if path.is_file() else None


def probe_recipe(*, smoke: bool) -> Any:
    """The probe runs episodes with the local training recipe's own budgets (main.py), so that "solved k of
    n" means what a training episode would see."""
    return make_recipe(smoke=smoke, backend="local")


async def probe(root: Path, *, sizes: Sizes, model: Any, model_name: str, sandbox: str = "local",
                engine: Any = None) -> Path:
    """n episodes per task of the probe subset; resumes from its journal. `engine`: an already open engine
    (tests pass a scripted one); by default the model is loaded here."""
    from codedojo.agent.engines import open_engine, profile_for
    from codedojo.data.probe import probe_tasks
    from codedojo.rollout.episodes import RolloutConfig
    from codedojo.train.plan import agent_config_for
    from codedojo.trial.runner import TrialOptions

    recipe = probe_recipe(smoke=sizes.smoke)
    rollout = RolloutConfig(max_open_sandboxes=recipe.max_open_sandboxes,
                            max_inflight_generations=recipe.sglang_server_concurrency,
                            trial=TrialOptions(backend=sandbox))
    owned = engine is None
    engine = engine or await open_engine(model)
    try:
        return await probe_tasks(root / f"{sizes.probe_subset}.jsonl", engine=engine, model=model_name, n=sizes.n,
                                 seed=SPLIT_SEED, agent_config=agent_config_for(recipe, profile=profile_for(model)),
                                 rollout=rollout)
    finally:
        if owned:
            await engine.close()


def mixed(root: Path, *, sizes: Sizes, model_name: str, from_dump: Path | None = None) -> Any:
    """The mixed-reward subset of the probe subset, from the probe's counts (or an eval dump's)."""
    from codedojo.data.dumps import probe_from_dump
    from codedojo.data.mixed import mixed_subset
    from codedojo.data.probe import probe_stem

    source = root / f"{sizes.probe_subset}.jsonl"
    if from_dump is not None:
        counts = probe_from_dump(source, dump=from_dump, model=model_name, n=sizes.n)
    else:
        stem = probe_stem(source, model=model_name, n=sizes.n)
        counts = stem.with_name(stem.name + ".json")
    report = mixed_subset(source, probe=counts)
    print(report.text())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", nargs="?", choices=("all", "prepare", "warm", "probe", "mixed"),
                        default="all")
    parser.add_argument("--smoke", action="store_true", default=os.environ.get("CODEDOJO_SMOKE") == "1",
                        help="sizes for a 2-core CPU: 24 guided tasks, train-4 and train-8, probe train-8 with n=4 "
                        "(also CODEDOJO_SMOKE=1)")
    parser.add_argument("--source", choices=tuple(DATASET_ROOTS), default="builtin", help="where tasks come from")
    parser.add_argument("--rows", default=HF_DATASET, help="--source swe-rebench: a parquet/JSON/JSONL file or dataset")
    parser.add_argument("--folder", type=Path, help="--source folder: a folder of Harbor tasks")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help=f"parent of the dataset root ({DATA_DIR})")
    parser.add_argument("--dataset-root", help="folder name under --data-dir (default: per source)")
    parser.add_argument("--limit", type=int, help="at most this many tasks (default: all; --smoke: 24)")
    parser.add_argument("--min-grade", default=MIN_GRADE, help="SWE-rebench quality grade or better; 'none' keeps all")
    parser.add_argument("--no-validate", action="store_true", help="skip the oracle/nop check")
    parser.add_argument("--sandbox", choices=("local", "docker", "modal"), default="local", help="sandbox backend")
    parser.add_argument("--workers", type=int, default=2, help="tasks generated and checked at once")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the probe's model")
    parser.add_argument("--no-warm-start", action="store_true",
                        help="probe (and train) the model as it is, without the warm step's fine-tuning")
    parser.add_argument("--from-dump", type=Path, help="mixed: count an eval dump instead of the probe's episodes")
    args = parser.parse_args(argv)

    sizes = SMOKE if args.smoke else FULL
    if args.limit is not None:
        sizes = Sizes(**{**sizes.__dict__, "limit": args.limit})
    name = args.dataset_root or DATASET_ROOTS[args.source]
    if not name or name in {".", ".."} or "/" in name:
        parser.error(f"dataset root must be a single folder name, got {name!r}")
    root = args.data_dir / name
    from codedojo.journal import JournalError

    try:
        if args.step in ("all", "prepare"):
            counts = prepare(root, source=args.source, sizes=sizes, rows=args.rows, folder=args.folder,
                             min_grade=None if args.min_grade.lower() == "none" else args.min_grade,
                             validate=not args.no_validate, sandbox=args.sandbox, workers=args.workers)
            print("\n".join(f"{subset}: {count}" for subset, count in counts.items()))
        if args.step == "warm" or (args.step == "all" and args.source == "builtin" and not args.no_warm_start):
            if args.source != "builtin":
                raise ValueError("the warm step needs bundled tasks (--source builtin): only they have an expert")
            print(f"warm start: {warm(root, sizes=sizes, model=args.model)}")
        if args.no_warm_start:
            (root / WARM_START).unlink(missing_ok=True)
        warmed = warm_model(root)
        model_name = f"{args.model}-sft" if warmed else args.model
        if args.step in ("all", "probe"):
            asyncio.run(probe(root, sizes=sizes, model=str(warmed or args.model), model_name=model_name,
                              sandbox=args.sandbox))
        if args.step in ("all", "mixed"):
            report = mixed(root, sizes=sizes, model_name=model_name, from_dump=args.from_dump)
            subset = report.path.stem if report.rows else sizes.probe_subset
            smoke = "CODEDOJO_SMOKE=1 " if args.smoke else ""
            print(f"train on it: {smoke}CODEDOJO_TRAIN_SUBSET={subset} python -m tutorials.coding_agent.main")
    except (ValueError, JournalError, FileNotFoundError) as e:
        print(f"dataset: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

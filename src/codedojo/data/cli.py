"""`codedojo dataset <stage>`: the dataset pipeline's stages, one subcommand each (docs/dataset.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from codedojo.cli import positive_int


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dataset = sub.add_parser(
        "dataset", help="build training and eval datasets: ingest, prefilter, validate, split, sample, probe, mixed",
        description="Stages of the dataset pipeline. Each writes a JSONL (rows {prompt, label, metadata.task_path}) "
        "and a .provenance.json beside it; the stages that run tasks resume from their journal when rerun.")
    stages = dataset.add_subparsers(dest="dataset_command", metavar="STAGE", required=True)

    p = stages.add_parser("ingest", help="list a task source as <root>/all.jsonl",
                          description="Exactly one source: --builtin, --folder or --swe-rebench.")
    p.add_argument("--root", type=Path, required=True, help="dataset folder (holds tasks/ and the JSONL files)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--builtin", action="store_true", help="generate the bundled suite into ROOT/tasks")
    source.add_argument("--folder", type=Path, help="a folder of Harbor task directories (used in place)")
    source.add_argument("--swe-rebench", metavar="FILE_OR_DATASET",
                        help="SWE-rebench V2 rows (.parquet/.json/.jsonl, or nebius/SWE-rebench-V2)")
    p.add_argument("--tier", choices=("warmup", "easy", "hard"), help="--builtin: only this tier")
    p.add_argument("--limit", type=positive_int, help="--builtin / --swe-rebench: at most this many tasks")
    p.add_argument("--seed", type=int, default=0, help="--builtin: generation seed (default 0)")
    p.add_argument("--repo", action="append", help="--builtin: only this bundled repository (repeatable)")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="--builtin: mutants tested at once")
    p.set_defaults(func=_ingest)

    p = stages.add_parser("prefilter", help="keep rows whose metadata matches",
                          description="Every given criterion must hold; repeat a flag to allow several values.")
    _io(p, default_output="prefiltered.jsonl")
    p.add_argument("--language", action="append", help="allowed language (python, c, ts, ...)")
    p.add_argument("--difficulty", action="append", help="allowed difficulty or tier (easy, medium, hard, warmup)")
    p.add_argument("--min-grade", help="SWE-rebench quality grade this or better (A best); tasks without one pass")
    p.add_argument("--exclude-flag", action="append", help="drop tasks with this quality flag (B1..B6)")
    p.add_argument("--repository", action="append", help="allowed repository")
    p.add_argument("--exclude-repository", action="append", help="dropped repository")
    p.set_defaults(func=_prefilter)

    p = stages.add_parser("validate", help="oracle must score 1.0 twice and nop 0.0; drop the rest",
                          description="Runs the reference solution twice (a task it does not solve both times is "
                          "flaky) and the nop agent once per task. Resumable: results go to a journal.")
    _io(p, default_output="validated.jsonl")
    p.add_argument("--workers", type=positive_int, default=2, help="tasks checked at once (default 2)")
    p.add_argument("--backend", default="local", help="sandbox backend: local, docker, modal (default local)")
    p.set_defaults(func=_validate)

    p = stages.add_parser("split", help="repository-disjoint train/eval split, balanced by language and difficulty",
                          description="Writes eval.jsonl (exactly the eval size) and train-full.jsonl (every task "
                          "of the training repositories), and prints the balance report.")
    p.add_argument("--input", type=Path, required=True, help="rows to split")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--eval-size", type=positive_int, help="eval tasks")
    size.add_argument("--eval-fraction", type=float, default=0.2, help="eval tasks as a share of all (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    p.add_argument("--balance", choices=("proportional", "equal"), default="proportional",
                   help="target mix over (language, difficulty): as in the input, or equal (default proportional)")
    p.set_defaults(func=_split)

    p = stages.add_parser("sample", help="a balanced sample of N tasks (train-N.jsonl, eval-N.jsonl)")
    p.add_argument("--input", type=Path, required=True, help="rows to sample from (train-full.jsonl, eval.jsonl)")
    p.add_argument("--size", type=positive_int, required=True, help="tasks to sample")
    p.add_argument("--name", help="output name without .jsonl (default: train-N or eval-N after the input)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--balance", choices=("proportional", "equal"), default="proportional", help="target mix")
    p.set_defaults(func=_sample)

    p = stages.add_parser("probe", help="n episodes per task with a frozen model; per-task success counts",
                          description="Runs the agent loop n times per task (or reads a rollout/eval dump with "
                          "--from-dump) and writes <input>-probe-<model>-n<n>.json. Resumable: every episode is "
                          "journalled in <input>-probe-<model>-n<n>.episodes.jsonl as it finishes.")
    p.add_argument("--input", type=Path, required=True, help="rows to probe (e.g. train-300.jsonl)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="model name or Hugging Face folder")
    p.add_argument("--n", type=positive_int, default=8, help="episodes per task (default 8)")
    p.add_argument("--seed", type=int, default=0, help="probe seed (default 0)")
    p.add_argument("--from-dump", type=Path,
                   help="count a rollout dump (rollout_eval_0.pt) or a `codedojo eval --trajectories` folder instead")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    p.add_argument("--max-steps", type=positive_int, default=75, help="model replies per episode (default 75)")
    p.add_argument("--max-new-tokens", type=positive_int, default=1024, help="tokens per reply (default 1024)")
    p.add_argument("--max-context", type=positive_int, default=32768, help="tokens per episode (default 32768)")
    p.add_argument("--episode-timeout", type=float, default=1800.0, help="seconds per episode (default 1800)")
    p.add_argument("--command-timeout", type=float, default=120.0, help="seconds per command (default 120)")
    p.add_argument("--profile", choices=("standard", "small"), help="prompt profile (default: the model's)")
    p.add_argument("--concurrency", type=positive_int, default=8, help="episodes at once (default 8)")
    p.add_argument("--backend", default="local", help="sandbox backend (default local)")
    p.add_argument("--device", help="torch device (default: cuda if available)")
    p.add_argument("--trajectories", type=Path, help="also save every episode's trajectory here")
    p.set_defaults(func=_probe)

    p = stages.add_parser("mixed", help="keep tasks with 0 < successes < n (the ones GRPO can learn from)",
                          description="Reads the probe's counts and writes <input>-mixed-reward-<slug>-n<n>.jsonl "
                          "in input order. No episode is run.")
    p.add_argument("--input", type=Path, required=True, help="the probed rows (e.g. train-300.jsonl)")
    p.add_argument("--probe", type=Path, required=True,
                   help="counts file from `codedojo dataset probe`, or its .episodes.jsonl journal (also mid-run)")
    p.add_argument("--slug", help="name part after mixed-reward- (default: <model>-agentic)")
    p.add_argument("--allow-partial", action="store_true",
                   help="filter the tasks probed so far (the rest are reported as incomplete)")
    p.set_defaults(func=_mixed)


def _io(p: argparse.ArgumentParser, *, default_output: str) -> None:
    p.add_argument("--input", type=Path, required=True, help="rows to read")
    p.add_argument("--output", type=Path, help=f"rows to write (default: {default_output} beside the input)")


def _output(args: argparse.Namespace, default: str) -> Path:
    return args.output or args.input.with_name(default)


def _fail(message: str) -> int:
    print(f"codedojo dataset: {message}", file=sys.stderr)
    return 2


def _ingest(args: argparse.Namespace) -> int:
    from codedojo.data.ingest import ingest_builtin, ingest_folder, ingest_swerebench
    from codedojo.journal import JournalError

    try:
        if args.builtin:
            out = ingest_builtin(root=args.root, tier=args.tier, limit=args.limit, seed=args.seed,
                                 repositories=tuple(args.repo or ()), workers=args.workers)
        elif args.folder:
            out = ingest_folder(args.folder, root=args.root)
        else:
            out = ingest_swerebench(args.swe_rebench, root=args.root, limit=args.limit)
    except (ValueError, JournalError, FileNotFoundError) as e:
        return _fail(str(e))
    print(f"{out}: {_count(out)} tasks")
    return 0


def _prefilter(args: argparse.Namespace) -> int:
    from codedojo.data.prefilter import Criteria, prefilter

    criteria = Criteria(languages=tuple(args.language or ()), difficulties=tuple(args.difficulty or ()),
                        min_grade=args.min_grade, exclude_flags=tuple(args.exclude_flag or ()),
                        repositories=tuple(args.repository or ()),
                        exclude_repositories=tuple(args.exclude_repository or ()))
    try:
        out, dropped = prefilter(args.input, output=_output(args, "prefiltered.jsonl"), criteria=criteria)
    except (ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    print(f"{out}: kept {_count(out)}; dropped " + (", ".join(f"{k} {v}" for k, v in dropped.items()) or "none"))
    return 0


def _validate(args: argparse.Namespace) -> int:
    import asyncio

    from codedojo.data.validation import validate_tasks
    from codedojo.journal import JournalError

    try:
        out = asyncio.run(validate_tasks(args.input, output=_output(args, "validated.jsonl"), workers=args.workers,
                                         backend=args.backend))
    except (ValueError, JournalError, FileNotFoundError) as e:
        return _fail(str(e))
    print(f"{out}: {_count(out)} tasks behave")
    return 0


def _split(args: argparse.Namespace) -> int:
    from codedojo.data.split import SplitError, split_dataset

    try:
        report = split_dataset(args.input, eval_size=args.eval_size, eval_fraction=args.eval_fraction,
                               seed=args.seed, balance=args.balance)
    except (SplitError, ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    print(report.text())
    return 0


def _sample(args: argparse.Namespace) -> int:
    from codedojo.data.sample import sample_dataset
    from codedojo.data.split import SplitError

    try:
        report = sample_dataset(args.input, size=args.size, name=args.name, seed=args.seed, balance=args.balance)
    except (SplitError, ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    print(report.text())
    return 0


def _probe(args: argparse.Namespace) -> int:
    import asyncio

    from codedojo.journal import JournalError

    try:
        if args.from_dump:
            from codedojo.data.dumps import probe_from_dump

            out = probe_from_dump(args.input, dump=args.from_dump, model=args.model, n=args.n)
        else:
            out = asyncio.run(_run_probe(args))
    except (ValueError, JournalError, FileNotFoundError) as e:
        return _fail(str(e))
    from codedojo.data.probe import load_counts, summarize

    n, _, counts = load_counts(out)
    summary = summarize(counts, n=n)
    print(f"{out}: {summary['tasks']} tasks, {summary['complete']} with all {n} episodes valid")
    print("tasks by successes (k of n): " + ", ".join(f"{k}: {v}" for k, v in summary["success_histogram"].items()))
    return 0


async def _run_probe(args: argparse.Namespace) -> Path:
    from codedojo.agent.engines import open_engine, profile_for
    from codedojo.agent.loop import AgentConfig
    from codedojo.data.probe import probe_tasks
    from codedojo.inference.protocol import SamplingParams
    from codedojo.rollout.episodes import RolloutConfig
    from codedojo.trial.runner import TrialOptions

    agent = AgentConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                        max_context_tokens=args.max_context, episode_timeout_sec=args.episode_timeout,
                        command_timeout_sec=args.command_timeout,
                        prompt_profile=args.profile or profile_for(args.model),
                        sampling=SamplingParams(temperature=args.temperature))
    rollout = RolloutConfig(max_open_sandboxes=args.concurrency, max_inflight_generations=args.concurrency,
                            trial=TrialOptions(backend=args.backend))
    engine: Any = await open_engine(args.model, device=args.device)
    try:
        return await probe_tasks(args.input, engine=engine, model=args.model, n=args.n, seed=args.seed,
                                 agent_config=agent, rollout=rollout, trajectory_dir=args.trajectories)
    finally:
        await engine.close()


def _mixed(args: argparse.Namespace) -> int:
    from codedojo.data.mixed import mixed_subset

    try:
        report = mixed_subset(args.input, probe=args.probe, slug=args.slug, allow_partial=args.allow_partial)
    except (ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    print(report.text())
    return 0 if report.rows else 1


def _count(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())

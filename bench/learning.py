"""Does the agent learn to find fixes? A pre-registered comparison on held-out repositories and fresh bugs.

    .venv/bin/python bench/learning.py --work /work/exp/learning4 --out docs/results/learning4

Tasks: the bundled suite's three curriculum tiers, which state the same bugs three ways: guided (the line and
what it must become), hinted (the line and the kind of bug) and warm-up (the line only). The factory draws
--per-repo bugs per repository, a third of them warm-up bugs that each tier restates. Earlier plans held
out moneybox, planegeo, textkit, unitconv, routegraph and iniconf and evaluated on their first 51 draws, and the
warm-up probe of docs/dataset.md ran every repository's first 30; so this plan turns the split around: it
trains on those six repositories' first --train-below draws and evaluates on the other six's draws from
--held-out-from on, bugs no earlier plan evaluated or calibrated on (110 per tier at the defaults). Probes
(bench/curriculum_probe.py) calibrate on the training repositories' draws from --train-below on, which
nothing trains on, never on held-out ones.

Arms, each from SmolLM2-135M-Instruct, in stages that are each reused when their output exists:
  guided_grpo  today's recipe (learning3): SFT on the expert's guided demonstrations, GRPO on the guided tasks
  cur_sft      SFT on the expert's demonstrations of every tier (on hinted and warm-up tasks the expert
               searches: it tries wrong rewrites of the line before the fix, each with a test run)
  cur_grpo     GRPO from cur_sft on every tier, drawn by the tier curriculum (CurriculumConfig)
  cur_rs       rejection sampling at equal episodes from the same start: cur_sft rolled out on exactly the
               tasks cur_grpo rolled out, as many times, then SFT from cur_sft on the solved episodes
Every arm is evaluated on the held-out warm-up and hinted tasks; cur_grpo and guided_grpo on the held-out
guided tasks too: --n episodes per task at --eval-temperature. The figures the hypotheses test come first.

Before any stage runs, the plan (hypotheses, command, git commit, every setting and seed, every task name) is
written to <work>/plan.json; a rerun with other settings in the same folder is refused. An evaluation runs
only at the plan's commit with a clean tree (src/, bench/), or at a commit that <work>/plan_log.json states
harmless (`{"commits": {"<sha>": "why this diff cannot change a figure"}}`).

Writes <out>/learning.json (every figure with its standard error, paired differences with standard errors
over tasks and clustered by repository, the curriculum's per-step shares and pass rates, stage times),
<out>/learning.png, the per-task evaluations and GRPO metrics, and <out>/trajectories/<eval>.tar.gz.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.budget import profile_budget
from codedojo.agent.engines import open_engine, profile_for
from codedojo.agent.expert import demonstrations
from codedojo.agent.loop import AgentConfig
from codedojo.config import AgentTaskDataset, CurriculumConfig, ExtraConfig, SmolLM2_Recipe, TrainConfig
from codedojo.inference.protocol import SamplingParams
from codedojo.inference.specs import HFFolder, resolve_model
from codedojo.memory import peak_rss_gib, return_freed_memory
from codedojo.rollout.episodes import RolloutConfig
from codedojo.rollout.evaluation import EvalReport, TaskScore, evaluate, paired_difference
from codedojo.tasks.task import Task, discover_tasks
from codedojo.train.default import builtin_suite, split_by_repository, write_dataset
from codedojo.train.sft import SFTConfig, load_trajectories, run_sft

HELD_OUT = ("cachebox", "datecalc", "exprcalc", "matrixlite", "shiftplan", "stockroom")
MODEL = "smollm2-135m-instruct"
TIERS = ("guided", "hinted", "warmup")
GUIDED_BEFORE = 0.750
"""Held-out guided pass@1 of learning3's GRPO model (docs/results/learning3), the level H3 must keep."""
HYPOTHESES = {
    "H1": "warm-up, held out: cur_grpo pass@1 >= 0.20, and cur_grpo - guided_grpo > 2 paired standard errors",
    "H2": "hinted, held out: cur_grpo - cur_rs > 2 paired standard errors (GRPO ahead of rejection sampling at "
          "equal episodes from the same start)",
    "H3": f"guided, held out: cur_grpo pass@1 >= {GUIDED_BEFORE} - 1 standard error (no regression below "
          "learning3's GRPO model)",
}
EVALS = (("cur_grpo", "warmup"), ("guided_grpo", "warmup"), ("cur_rs", "hinted"), ("cur_grpo", "hinted"),
         ("cur_grpo", "guided"), ("cur_sft", "warmup"), ("cur_sft", "hinted"), ("cur_rs", "warmup"),
         ("guided_grpo", "hinted"), ("guided_grpo", "guided"))
"""Every (arm, held-out tier) evaluation, in the order they run: the hypotheses' figures first."""
DIFFERENCES = (("guided_grpo/warmup", "cur_grpo/warmup"), ("cur_sft/warmup", "cur_grpo/warmup"),
               ("cur_rs/warmup", "cur_grpo/warmup"), ("cur_rs/hinted", "cur_grpo/hinted"),
               ("cur_sft/hinted", "cur_grpo/hinted"), ("cur_sft/hinted", "cur_rs/hinted"),
               ("guided_grpo/hinted", "cur_grpo/hinted"), ("guided_grpo/guided", "cur_grpo/guided"))
"""The paired differences the summary reports, (before, after): after - before over the tasks both scored."""


class PlanMismatch(SystemExit):
    """The work folder holds results registered under another plan, or the code is not the plan's."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/results/learning4"))
    parser.add_argument("--work", type=Path, default=Path("runs/learning4"), help="intermediate files and the plan")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--per-repo", type=int, default=102, help="factory draws per repository")
    parser.add_argument("--held-out-from", type=int, default=30,
                        help="held-out repositories' draws from this index on are evaluated (fresh bugs)")
    parser.add_argument("--train-below", type=int, default=51,
                        help="training repositories' draws below this index are trained on; the rest calibrate")
    parser.add_argument("--held-out", default=",".join(HELD_OUT), help="comma-separated held-out repositories")
    parser.add_argument("--tasks", type=Path, default=None,
                        help="task folders instead of the bundled suite (tests): tiers from metadata, split by "
                             "the held-out repositories' names, no index rule")
    parser.add_argument("--n", type=int, default=2, help="eval episodes per held-out task")
    parser.add_argument("--eval-temperature", type=float, default=0.6)
    parser.add_argument("--sft-epochs", type=int, default=1)
    parser.add_argument("--sft-lr", type=float, default=1.5e-4)
    parser.add_argument("--sft-batch", type=int, default=4)
    parser.add_argument("--grpo-steps", type=int, default=12)
    parser.add_argument("--grpo-lr", type=float, default=2e-5)
    parser.add_argument("--lr-warmup", type=int, default=4, help="GRPO optimizer steps of linear warm-up")
    parser.add_argument("--global-batch-size", type=int, default=16)
    parser.add_argument("--rollout-batch-size", type=int, default=8, help="groups trained on per GRPO step")
    parser.add_argument("--over-sampling", type=int, default=16, help="tasks rolled out per GRPO step")
    parser.add_argument("--n-samples", type=int, default=4, help="episodes per task in a GRPO step")
    parser.add_argument("--no-dynamic-sampling", dest="dynamic_sampling", action="store_false",
                        help="train on groups whose rewards are all equal too")
    parser.add_argument("--rollout-temperature", type=float, default=SmolLM2_Recipe().rollout_temperature)
    parser.add_argument("--curriculum-start", default="1,0,0", help="initial shares of guided, hinted, warm-up")
    parser.add_argument("--promote-at", type=float, default=0.5)
    parser.add_argument("--retire-at", type=float, default=0.9)
    parser.add_argument("--shift", type=float, default=0.25)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--min-episodes", type=int, default=16)
    parser.add_argument("--rs-epochs", type=int, default=1)
    small = profile_budget("small")  # the budget every stage shares (codedojo.agent.budget)
    parser.add_argument("--max-steps", type=int, default=small.max_steps)
    parser.add_argument("--max-new-tokens", type=int, default=small.max_new_tokens)
    parser.add_argument("--max-context", type=int, default=small.max_context_tokens)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0, help="the root of every seed in the plan")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--arms", default=None,
                        help="comma-separated arms to evaluate this run (default: all); the others' cached "
                             "evaluations still enter the summary. A session that cannot keep checkpoints runs "
                             "the plan an arm at a time")
    return parser.parse_args(argv)


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def git_commit() -> str | None:
    return git("rev-parse", "HEAD")


def plan_seeds(seed: int) -> dict[str, int]:
    """Every stage's seed, from the plan's root seed."""
    return {"demos": seed, "sft": seed, "grpo": seed, "rs_sampling": seed + 1, "rs_sft": seed, "eval": seed + 7}


def curriculum(args: argparse.Namespace) -> CurriculumConfig:
    return CurriculumConfig(tiers=TIERS, start=tuple(float(x) for x in args.curriculum_start.split(",")),
                            promote_at=args.promote_at, retire_at=args.retire_at, shift=args.shift,
                            window=args.window, min_episodes=args.min_episodes)


# ----- tasks ------------------------------------------------------------------------------------------------


def draw_index(task: Task) -> int:
    """The factory's draw index of a bundled task (`<repo>-<index>-<tier>`)."""
    return int(task.name.split("-")[-2])


def repository(name: str) -> str:
    return name.split("-")[0]


def build_tasks(args: argparse.Namespace, console: Console) -> tuple[dict[str, list[Task]], dict[str, list[Task]],
                                                                    dict[str, list[Task]]]:
    """Per tier: training tasks, held-out tasks and calibration tasks (training repositories' later draws)."""
    held = tuple(r for r in args.held_out.split(",") if r)
    train: dict[str, list[Task]] = {}
    held_out: dict[str, list[Task]] = {}
    calibration: dict[str, list[Task]] = {}
    if args.tasks is not None:
        pool, evaluation = split_by_repository(discover_tasks([args.tasks]), held_out=held)
        for tier in TIERS:
            train[tier] = [t for t in pool if t.config.metadata.get("tier") == tier]
            held_out[tier] = [t for t in evaluation if t.config.metadata.get("tier") == tier]
            calibration[tier] = []
    else:
        for tier in TIERS:
            suite = builtin_suite(console=console, tier=tier, per_repo=args.per_repo)
            pool, evaluation = split_by_repository(discover_tasks([suite]), held_out=held)
            train[tier] = [t for t in pool if draw_index(t) < args.train_below]
            calibration[tier] = [t for t in pool if draw_index(t) >= args.train_below]
            held_out[tier] = [t for t in evaluation if draw_index(t) >= args.held_out_from]
    if not train["guided"] or not any(held_out.values()):
        raise SystemExit(f"{sum(map(len, train.values()))} training and {sum(map(len, held_out.values()))} held-out "
                         f"tasks: need both (held-out repositories: {', '.join(held)})")
    return train, held_out, calibration


# ----- the plan ----------------------------------------------------------------------------------------------


def make_plan(args: argparse.Namespace, *, train: dict[str, list[Task]], held_out: dict[str, list[Task]]
              ) -> dict[str, Any]:
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(vars(args).items())
                if k not in ("out", "work", "device", "concurrency", "arms")}
    return {
        "hypotheses": HYPOTHESES,
        "command": "python bench/learning.py " + shlex.join(sys.argv[1:]),
        "git_commit": git_commit(),
        "settings": settings,
        "seeds": plan_seeds(args.seed),
        "evaluations": [f"{arm}/{tier}" for arm, tier in EVALS],
        "training_tasks": {tier: sorted(t.name for t in tasks) for tier, tasks in train.items()},
        "held_out_tasks": {tier: sorted(t.name for t in tasks) for tier, tasks in held_out.items()},
    }


def register(plan: dict[str, Any], work: Path) -> dict[str, Any]:
    """Write the plan before any result exists, or check a rerun against the one already registered."""
    path = work / "plan.json"
    if path.is_file():
        registered = json.loads(path.read_text())
        body = {k: v for k, v in registered.items() if k not in ("registered_at", "sha256", "command", "git_commit")}
        mine = {k: v for k, v in plan.items() if k not in ("command", "git_commit")}
        if body != mine:
            differ = sorted(k for k in body.keys() | mine.keys() if body.get(k) != mine.get(k))
            raise PlanMismatch(f"{path} registers another plan (differs in: {', '.join(differ)}); use a new --work "
                               "folder for a new plan")
        return dict(registered)
    text = json.dumps(plan, sort_keys=True)
    registered = {**plan, "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "sha256": hashlib.sha256(text.encode()).hexdigest()}
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(registered, indent=2))
    return registered


def check_code(plan: dict[str, Any], work: Path) -> str | None:
    """None when this checkout may evaluate under the plan, else why not: the plan's commit with a clean src/
    and bench/, or a commit that <work>/plan_log.json states harmless."""
    head, registered = git_commit(), plan.get("git_commit")
    if head is None or registered is None:
        return None  # not a git checkout (tests): nothing to compare
    log = work / "plan_log.json"
    harmless = json.loads(log.read_text()).get("commits", {}) if log.is_file() else {}
    if head != registered and head not in harmless:
        return (f"the plan was registered at {registered[:10]} and this checkout is at {head[:10]}: run from a "
                f"worktree at the plan's commit, or state in {log} why `git diff {registered[:10]} {head[:10]}` "
                "cannot change a figure (\"commits\": {\"<sha>\": \"reason\"})")
    dirty = git("status", "--porcelain", "--", "src", "bench")
    if dirty:
        return f"src/ or bench/ has uncommitted changes: {dirty.splitlines()[:3]}"
    return None


# ----- stages --------------------------------------------------------------------------------------------------


def agent_config(args: argparse.Namespace, *, temperature: float) -> AgentConfig:
    profile = profile_for(args.model)
    return AgentConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                       max_context_tokens=args.max_context, prompt_profile=profile,
                       max_output_chars=profile_budget(profile).max_output_chars,
                       sampling=SamplingParams(temperature=temperature))


def run_eval(model: Any, tasks: list[Task], *, args: argparse.Namespace, n: int, temperature: float, seed: int,
             out: Path, console: Console) -> dict[str, Any]:
    """An evaluation's report as a dict (cached in `out`; trajectories beside it, resumable)."""
    if out.is_file():
        return dict(json.loads(out.read_text()))

    async def go() -> EvalReport:
        engine = await open_engine(model, device=args.device)
        try:
            return await evaluate(tasks, engine=engine, n=n, agent_config=agent_config(args, temperature=temperature),
                                  rollout=RolloutConfig(max_open_sandboxes=args.concurrency), seed=seed,
                                  trajectory_dir=out.with_suffix(""), model=str(model), console=console)
        finally:
            await engine.close()

    data = asyncio.run(go()).to_dict()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    return data


def make_demos(args: argparse.Namespace, tasks: list[Task], folder: Path, *, seed: int) -> None:
    """The expert's solved demonstrations of `tasks` in `folder` (one each), unless there already. Tasks whose
    demonstration does not fit the episode budget are left out and listed in folder/.complete."""
    if (folder / ".complete").is_file():
        return
    tokenizer = resolve_model(args.model).load_tokenizer()
    config = agent_config(args, temperature=1.0)
    _, counts = asyncio.run(demonstrations(tasks, tokenizer=tokenizer, per_task=1, seed=seed, agent_config=config,
                                           out_dir=folder, concurrency=4, leave_out_over_budget=True))
    if not counts["solved"]:
        raise SystemExit(f"the expert solved none of the {len(tasks)} tasks: {counts}")
    (folder / ".complete").write_text(json.dumps(counts))


def make_sft(args: argparse.Namespace, model: Any, trajectories: Any, folder: Path, *, seed: int,
             console: Console) -> HFFolder:
    """SFT of `model` on `trajectories` into folder/final, unless there already."""
    if not (folder / "final" / "config.json").is_file():
        run_sft(model=model, trajectories=trajectories, device=args.device, out_dir=folder,
                config=SFTConfig(epochs=args.sft_epochs, lr=args.sft_lr, batch_sequences=args.sft_batch, seed=seed),
                console=console)
    return HFFolder(path=str(folder / "final"))


def make_grpo(args: argparse.Namespace, tasks: list[Task], model: Any, run_dir: Path, *, seed: int,
              with_curriculum: bool) -> HFFolder:
    """GRPO from `model` on `tasks` into run_dir/final (resumes from its last checkpoint), unless there already."""
    if not (run_dir / "final" / "config.json").is_file():
        recipe = SmolLM2_Recipe(
            num_rollout=args.grpo_steps, rollout_batch_size=args.rollout_batch_size,
            n_samples_per_prompt=args.n_samples, lr=args.grpo_lr, global_batch_size=args.global_batch_size,
            over_sampling_batch_size=args.over_sampling, dynamic_sampling=args.dynamic_sampling,
            lr_warmup_iters=args.lr_warmup, rollout_max_response_len=args.max_new_tokens,
            rollout_max_context_len=args.max_context, rollout_temperature=args.rollout_temperature,
            max_open_sandboxes=args.concurrency, seed=seed, save="checkpoints", save_interval=args.grpo_steps,
            curriculum=curriculum(args) if with_curriculum else None,
            extra_config=ExtraConfig(agentic_max_steps=args.max_steps))
        dataset = AgentTaskDataset(write_dataset(tasks, run_dir.parent / f"{run_dir.name}.jsonl"))
        TrainConfig(model=model, dataset=dataset, recipe=recipe, run_dir=run_dir, device=args.device).launch()
    return HFFolder(path=str(run_dir / "final"))


def rolled_out(run_dir: Path) -> Counter[str]:
    """How many episodes of each task a GRPO run rolled out (its per-step episode files)."""
    counts: Counter[str] = Counter()
    for path in sorted((run_dir / "episodes").glob("step_*.jsonl")):
        counts.update(json.loads(line)["task"] for line in path.read_text().splitlines() if line.strip())
    return counts


def make_rs(args: argparse.Namespace, tasks: list[Task], start: HFFolder, grpo_dir: Path, *, seeds: dict[str, int],
            console: Console) -> tuple[Any, dict[str, Any]]:
    """Rejection sampling at equal episodes: `start` rolled out on the tasks GRPO rolled out, as often, at GRPO's
    temperature; then SFT from `start` on the solved episodes (the start itself when none was solved)."""
    work = args.work
    counts = rolled_out(grpo_dir)
    by_name = {t.name: t for t in tasks}
    per_count: dict[int, list[Task]] = {}
    for name, count in sorted(counts.items()):
        per_count.setdefault(count, []).append(by_name[name])
    sampled: dict[str, Any] = {"episodes": sum(counts.values()), "tasks": len(counts), "solved": 0}
    for count, group in sorted(per_count.items()):
        report = run_eval(start, group, args=args, n=count, temperature=args.rollout_temperature,
                          seed=seeds["rs_sampling"] + count, out=work / f"rs_sampling_n{count}.json", console=console)
        sampled["solved"] += sum(t["solved"] for t in report["per_task"])
    folders = [work / f"rs_sampling_n{count}" for count in per_count]
    solved = load_trajectories(folders, min_reward=1.0)
    if not solved:
        return start, sampled
    return make_sft(args, start, solved, work / "rs", seed=seeds["rs_sft"], console=console), sampled


# ----- figures --------------------------------------------------------------------------------------------------


def report_of(data: dict[str, Any]) -> EvalReport:
    """An EvalReport rebuilt from its `to_dict` form (per-task counts are all the scores need)."""
    tasks = [TaskScore(task=t["task"], samples=t["samples"], solved=t["solved"], mean_reward=t["mean_reward"],
                       statuses=t["statuses"]) for t in data["per_task"]]
    return EvalReport(tasks=tasks, n=data["n"], statuses=data["statuses"], wall_sec=data["wall_sec"])


def figures(data: dict[str, Any]) -> dict[str, Any]:
    n = data["n"]
    return {"pass@1": data["pass@1"], "stderr": data["pass@1_stderr"], f"pass@{n}": data.get(f"pass@{n}"),
            "tasks": data["tasks"], "statuses": data["statuses"], "wall_sec": data["wall_sec"]}


def difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after - before, paired over tasks, with its standard error and the one clustered by repository."""
    d = paired_difference(report_of(before), report_of(after), cluster_of=repository)
    return {**d.to_dict(), "exceeds_2_stderr": d.stderr is not None and d.mean > 2 * d.stderr,
            "exceeds_2_cluster_stderr": d.cluster_stderr is not None and d.mean > 2 * d.cluster_stderr}


def verdicts(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if {"cur_grpo/warmup", "guided_grpo/warmup"} <= results.keys():
        gain = difference(results["guided_grpo/warmup"], results["cur_grpo/warmup"])
        level = results["cur_grpo/warmup"]["pass@1"] or 0.0
        out["H1"] = {"cur_grpo_pass@1": level, "cur_grpo_minus_guided_grpo": gain,
                     "holds": level >= 0.20 and gain["exceeds_2_stderr"]}
    if {"cur_grpo/hinted", "cur_rs/hinted"} <= results.keys():
        gain = difference(results["cur_rs/hinted"], results["cur_grpo/hinted"])
        out["H2"] = {"cur_grpo_minus_cur_rs": gain, "holds": gain["exceeds_2_stderr"]}
    if "cur_grpo/guided" in results:
        r = results["cur_grpo/guided"]
        out["H3"] = {"cur_grpo_pass@1": r["pass@1"], "stderr": r["pass@1_stderr"],
                     "holds": (r["pass@1"] or 0.0) >= GUIDED_BEFORE - (r["pass@1_stderr"] or 0.0)}
    return out


def training_curve(run_dir: Path) -> list[dict[str, float]]:
    keys = ("rollout/reward_mean", "rollout/mixed_group_frac", "rollout/groups_trained", "train/clip_frac",
            "train/grad_norm", "train/kl", "train/entropy", "train/train_rollout_logprob_abs_diff")
    rows = [r for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if r.get("kind") == "train"] \
        if (run_dir / "metrics.jsonl").is_file() else []
    return [{"step": r["step"], **{k: r[k] for k in r if k in keys or k.startswith(("curriculum/", "tier/"))}}
            for r in rows]


def pack_trajectories(work: Path, out: Path, names: list[str]) -> None:
    """Each evaluation's trajectory folder as <out>/trajectories/<name>.tar.gz (what the agent did, readable)."""
    folder = out / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        source, target = work / name, folder / f"{name}.tar.gz"
        if source.is_dir() and not target.is_file():
            with tarfile.open(target, "w:gz") as tar:
                tar.add(source, arcname=name)


# ----- the run --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    wanted = set(args.arms.split(",")) if args.arms else {name for name, _ in EVALS}
    if unknown := wanted - {name for name, _ in EVALS}:
        raise SystemExit(f"--arms: unknown arm(s) {sorted(unknown)}; the plan's arms are "
                         f"{sorted({name for name, _ in EVALS})}")
    work, out = args.work, args.out
    times: dict[str, float] = json.loads((work / "times.json").read_text()) if (work / "times.json").is_file() else {}

    def stage(name: str, started: float) -> None:
        times.setdefault(name, round(time.monotonic() - started, 1))
        (work / "times.json").write_text(json.dumps(times, indent=2))
        return_freed_memory()

    t0 = time.monotonic()
    train, held_out, _ = build_tasks(args, console)
    plan = register(make_plan(args, train=train, held_out=held_out), work)
    seeds = plan["seeds"]
    every_tier = [t for tier in TIERS for t in train[tier]]
    console.print(f"training tasks {', '.join(f'{k} {len(v)}' for k, v in train.items())}; held-out "
                  f"{', '.join(f'{k} {len(v)}' for k, v in held_out.items())}; plan {work / 'plan.json'}")
    stage("tasks", t0)

    def timed(name: str, fn: Any) -> Any:
        started = time.monotonic()
        value = fn()
        stage(name, started)
        return value

    models: dict[str, Any] = {}
    results: dict[str, dict[str, Any]] = {}
    rs_sampled: dict[str, Any] = {}

    def arm(name: str) -> Any:
        if name in models:
            return models[name]
        if name == "cur_sft":
            timed("demos_all", lambda: make_demos(args, every_tier, work / "demos_all", seed=seeds["demos"]))
            models[name] = timed("sft_cur", lambda: make_sft(args, args.model, load_trajectories([work / "demos_all"]),
                                                             work / "sft_cur", seed=seeds["sft"], console=console))
        elif name == "cur_grpo":
            start = arm("cur_sft")
            models[name] = timed("grpo_cur", lambda: make_grpo(args, every_tier, start, work / "grpo_cur",
                                                               seed=seeds["grpo"], with_curriculum=True))
        elif name == "guided_grpo":
            timed("demos_guided", lambda: make_demos(args, train["guided"], work / "demos_guided", seed=seeds["demos"]))
            sft = timed("sft_guided", lambda: make_sft(args, args.model, load_trajectories([work / "demos_guided"]),
                                                       work / "sft_guided", seed=seeds["sft"], console=console))
            models[name] = timed("grpo_guided", lambda: make_grpo(args, train["guided"], sft, work / "grpo_guided",
                                                                  seed=seeds["grpo"], with_curriculum=False))
        elif name == "cur_rs":
            start, grpo_dir = arm("cur_sft"), work / "grpo_cur"
            arm("cur_grpo")
            model, sampled = timed("rs", lambda: make_rs(args, every_tier, start, grpo_dir, seeds=seeds,
                                                         console=console))
            rs_sampled.update(sampled)
            models[name] = model
        return models[name]

    for name, tier in EVALS:
        if not held_out[tier]:
            continue
        key = f"{name}/{tier}"
        cached = work / f"eval_{name}_{tier}.json"
        if cached.is_file():  # a cached evaluation needs no model: its arm is trained only when still needed
            results[key] = json.loads(cached.read_text())
            continue
        if name not in wanted:
            continue
        if (problem := check_code(plan, work)) is not None:
            raise PlanMismatch(f"not evaluating {key}: {problem}")
        model = arm(name)
        results[key] = timed(f"eval_{name}_{tier}", lambda m=model, t=tier, c=cached: run_eval(
            m, held_out[t], args=args, n=args.n, temperature=args.eval_temperature, seed=seeds["eval"], out=c,
            console=console))
        console.print(f"{key}: pass@1 {results[key]['pass@1']:.4f} +- {results[key]['pass@1_stderr'] or 0:.4f}")

    summary: dict[str, Any] = {
        "plan": plan, "n": args.n,
        "held_out_tasks": {tier: len(tasks) for tier, tasks in held_out.items()},
        "training_tasks": {tier: len(tasks) for tier, tasks in train.items()},
        "results": {key: figures(r) for key, r in results.items()},
        "differences": {f"{b}-vs-{a}": difference(results[a], results[b])
                        for a, b in DIFFERENCES if a in results and b in results},
        "hypotheses": verdicts(results),
        "rs_sampling": rs_sampled,
        "grpo_curves": {name: training_curve(work / name) for name in ("grpo_cur", "grpo_guided")},
        "stage_seconds": times, "peak_rss_gib": round(peak_rss_gib(), 2),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(summary, indent=2, default=str))
    for name in [f"eval_{a}_{t}.json" for a, t in EVALS] + ["plan.json", "times.json"]:
        if (work / name).is_file():
            (out / name).write_text((work / name).read_text())
    for name in ("grpo_cur", "grpo_guided"):
        if (work / name / "metrics.jsonl").is_file():
            (out / f"{name}-metrics.jsonl").write_text((work / name / "metrics.jsonl").read_text())
    pack_trajectories(work, out, [f"eval_{a}_{t}" for a, t in EVALS])
    plot(summary, out / "learning.png")
    console.print(json.dumps(summary["hypotheses"], indent=2))
    return 0


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    curve = summary["grpo_curves"].get("grpo_cur", [])
    steps = [r["step"] + 1 for r in curve]
    for tier in TIERS:
        left.plot(steps, [r.get(f"curriculum/{tier}/share", 0.0) for r in curve], marker="o", label=f"{tier} share")
        left.plot(steps, [r.get(f"tier/{tier}/pass_rate") for r in curve], linestyle="--", label=f"{tier} pass rate")
    left.set(title="curriculum GRPO: share and training pass rate per tier", xlabel="step", ylim=(0, 1))
    left.legend(fontsize=7)
    keys = [k for k in summary["results"]]
    values = [summary["results"][k]["pass@1"] or 0.0 for k in keys]
    errors = [summary["results"][k]["stderr"] or 0.0 for k in keys]
    right.bar(range(len(keys)), values, yerr=errors, capsize=4)
    right.set_xticks(range(len(keys)), keys, rotation=60, fontsize=7)
    right.set(title=f"held-out pass@1 (n={summary['n']})", ylabel="pass@1", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

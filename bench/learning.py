"""Does training make the agent better? A pre-registered comparison on held-out repositories.

    .venv/bin/python bench/learning.py --out docs/results/learning [--tier guided] [--n 2] [--grpo-steps 12]

Before anything runs, the plan is written to <work>/plan.json: the command, the git commit, the tier, the
held-out repositories and task names, every seed, n, temperatures, budgets, stage settings and the test
(GRPO - SFT on held-out pass@1 above twice its paired standard error). A rerun with a different plan in
the same work folder is refused, naming the settings that differ: the figures always belong to the plan
they were registered under.

Stages, in this order (each resumable: a finished stage's output is reused when the script is run again,
and GRPO continues from its last step's checkpoint):
  1. tasks     the bundled tasks of --tier, split by repository: --held-out repositories are never trained on;
               the warm-up restatement of the held-out bugs measures transfer
  2. demos     the scripted expert's solved episodes on the training tasks (one each)
  3. sft       supervised fine-tuning of the model on the demonstrations
  4. grpo      GRPO from the SFT model on the training tasks (the main job's recipe: lr 1e-5, 4 tasks x 4
               episodes per step; two optimizer steps of 8 episodes per rollout)
  5. eval      pass@1 and pass@n of SFT and GRPO on the held-out tasks: the hypothesis's figures come first
  6. rs        the rejection-sampling baseline at equal episodes: as many episodes of the SFT model on the
               training tasks as GRPO rolled out, at GRPO's rollout temperature, then SFT from the SFT model
               on the solved ones (what `codedojo sft --min-reward 1` does)
  7. eval      pass@1 and pass@n of RS and base on the held-out tasks; SFT and GRPO on the held-out warm-up
               tasks
The defaults are the calibration's (docs/results/guided-calibration.json: SFT pass@1 0.30 at the rollout
temperature on the guided tier): 102 held-out tasks x n=2, 102 training tasks. On the project's 2-core CPU
without native bf16 that is about five hours (SFT ~30 min, 12 GRPO steps ~1 h, the evaluations ~2.5 h).

Writes <out>/learning.json (the plan, each figure with its standard error over tasks, the paired differences
GRPO - SFT, GRPO - RS and RS - SFT with their standard errors, stage wall times, the reward curve) and
<out>/learning.png.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.budget import profile_budget
from codedojo.agent.engines import open_engine, profile_for
from codedojo.agent.evaluation import EvalReport, TaskScore, evaluate, paired_difference
from codedojo.agent.expert import demonstrations
from codedojo.agent.loop import AgentConfig
from codedojo.agent.rollout import RolloutConfig
from codedojo.config import AgentTaskDataset, ExtraConfig, SmolLM2_Recipe, TrainConfig
from codedojo.inference.protocol import SamplingParams
from codedojo.inference.specs import HFFolder, resolve_model
from codedojo.memory import peak_rss_gib, return_freed_memory
from codedojo.tasks.task import Task, discover_tasks
from codedojo.train.default import builtin_suite, split_by_repository, write_dataset
from codedojo.train.sft import SFTConfig, load_trajectories, run_sft

HELD_OUT = ("moneybox", "planegeo", "textkit", "unitconv", "routegraph", "iniconf")
MODEL = "smollm2-135m-instruct"
HYPOTHESIS = ("GRPO from the SFT model raises held-out pass@1 over the SFT model by more than twice the paired "
              "standard error of the difference (grpo_minus_sft.mean > 2 * grpo_minus_sft.stderr)")


class PlanMismatch(SystemExit):
    """The work folder holds results registered under another plan."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/results/learning"))
    parser.add_argument("--work", type=Path, default=Path("runs/learning"), help="intermediate files and the plan")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--tier", default="guided", help="the tier trained and evaluated on")
    parser.add_argument("--per-repo", type=int, default=51,
                        help="factory draws per repository (a third are warm-up bugs, which each tier restates: "
                             "51 gives 17 tasks per repository and tier)")
    parser.add_argument("--held-out", default=",".join(HELD_OUT), help="comma-separated held-out repositories")
    parser.add_argument("--tasks", type=Path, default=None,
                        help="use these task folders instead of the bundled suite (split by the held-out "
                             "repositories' names; no transfer stage)")
    parser.add_argument("--n", type=int, default=2, help="eval episodes per held-out task")
    parser.add_argument("--eval-temperature", type=float, default=0.6)
    parser.add_argument("--sft-epochs", type=int, default=1)
    parser.add_argument("--sft-lr", type=float, default=1.5e-4)
    parser.add_argument("--sft-batch", type=int, default=4)
    parser.add_argument("--grpo-steps", type=int, default=12)
    parser.add_argument("--grpo-lr", type=float, default=SmolLM2_Recipe().lr, help="the main job's recipe value")
    parser.add_argument("--global-batch-size", type=int, default=8,
                        help="samples per optimizer step: 8 of a step's 16 episodes gives two updates per rollout")
    parser.add_argument("--rollout-batch-size", type=int, default=4)
    parser.add_argument("--n-samples", type=int, default=4)
    parser.add_argument("--over-sampling", type=int, default=None,
                        help="tasks rolled out per GRPO step, of which the first --rollout-batch-size groups that "
                             "carry a signal are trained on (the recipe's over_sampling_batch_size; default: none)")
    parser.add_argument("--dynamic-sampling", action="store_true",
                        help="drop GRPO groups whose rewards are all equal before training (the recipe's field)")
    parser.add_argument("--lr-warmup", type=int, default=0, help="GRPO optimizer steps of linear learning-rate warm-up")
    parser.add_argument("--rollout-temperature", type=float, default=SmolLM2_Recipe().rollout_temperature)
    parser.add_argument("--rs-epochs", type=int, default=1)
    small = profile_budget("small")  # the budget every stage shares (codedojo.agent.budget)
    parser.add_argument("--max-steps", type=int, default=small.max_steps)
    parser.add_argument("--max-new-tokens", type=int, default=small.max_new_tokens)
    parser.add_argument("--max-context", type=int, default=small.max_context_tokens)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0, help="the root of every seed in the plan")
    parser.add_argument("--device", default="cpu")
    return parser.parse_args(argv)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def plan_seeds(seed: int) -> dict[str, int]:
    """Every stage's seed, from the plan's root seed."""
    return {"demos": seed, "sft": seed, "grpo": seed, "rs_sampling": seed + 1, "rs_sft": seed, "eval": seed + 7}


def make_plan(args: argparse.Namespace, *, train: list[Task], held_out: list[Task],
              transfer: list[Task]) -> dict[str, Any]:
    seeds = plan_seeds(args.seed)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(vars(args).items())
                if k not in ("out", "work", "device", "concurrency")}
    return {
        "hypothesis": HYPOTHESIS,
        "command": "python bench/learning.py " + shlex.join(sys.argv[1:]),
        "git_commit": git_commit(),
        "settings": settings,
        "seeds": seeds,
        "rs_episodes": grpo_episodes(args),
        "training_tasks": sorted(t.name for t in train),
        "held_out_tasks": sorted(t.name for t in held_out),
        "transfer_tasks": sorted(t.name for t in transfer),
    }


def grpo_episodes(args: argparse.Namespace) -> int:
    """The episodes GRPO rolls out over the plan (over-sampled tasks included): what the rejection-sampling
    baseline gets to match."""
    return args.grpo_steps * (args.over_sampling or args.rollout_batch_size) * args.n_samples


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
        return registered
    text = json.dumps(plan, sort_keys=True)
    registered = {**plan, "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "sha256": hashlib.sha256(text.encode()).hexdigest()}
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(registered, indent=2))
    return registered


def agent_config(args: argparse.Namespace, *, temperature: float) -> AgentConfig:
    profile = profile_for(args.model)
    return AgentConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                       max_context_tokens=args.max_context, prompt_profile=profile,
                       max_output_chars=profile_budget(profile).max_output_chars,
                       sampling=SamplingParams(temperature=temperature))


def run_eval(model: Any, tasks: list[Task], *, args: argparse.Namespace, n: int, temperature: float, seed: int,
             out: Path, console: Console) -> dict[str, Any]:
    """An evaluation's report as a dict (cached in `out`; trajectories beside it)."""
    if out.is_file():
        return json.loads(out.read_text())

    async def go() -> EvalReport:
        engine = await open_engine(model, device=args.device)
        try:
            return await evaluate(tasks, engine=engine, n=n, agent_config=agent_config(args, temperature=temperature),
                                  rollout=RolloutConfig(max_open_sandboxes=args.concurrency), seed=seed,
                                  trajectory_dir=out.with_suffix(""), model=str(model),
                                  console=console)
        finally:
            await engine.close()

    data = asyncio.run(go()).to_dict()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    return data


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
    d = paired_difference(report_of(before), report_of(after))
    exceeds = d.stderr is not None and d.mean > 2 * d.stderr
    return {**d.to_dict(), "exceeds_2_stderr": exceeds}


def rs_tasks(train: list[Task], episodes: int) -> tuple[list[Task], int]:
    """Training tasks and episodes per task that give at least `episodes` rollouts, spread evenly."""
    per_task = max(1, math.ceil(episodes / len(train)))
    count = math.ceil(episodes / per_task)
    return train[:count], per_task


def build_tasks(args: argparse.Namespace, console: Console, *, with_transfer: bool = True
                ) -> tuple[list[Task], list[Task], list[Task]]:
    """Stage 1: the training, held-out and transfer (warm-up restatement of the held-out bugs) tasks."""
    held = tuple(r for r in args.held_out.split(",") if r)
    if args.tasks is not None:
        train, held_out = split_by_repository(discover_tasks([args.tasks]), held_out=held)
        transfer: list[Task] = []
    else:
        suite = builtin_suite(console=console, tier=args.tier, per_repo=args.per_repo)
        train, held_out = split_by_repository(discover_tasks([suite]), held_out=held)
        transfer = []
        if args.tier != "warmup" and with_transfer:
            warm = builtin_suite(console=console, tier="warmup", per_repo=args.per_repo)
            _, transfer = split_by_repository(discover_tasks([warm]), held_out=held)
    if not train or not held_out:
        raise SystemExit(f"{len(train)} training and {len(held_out)} held-out tasks: need both "
                         f"(held-out repositories: {', '.join(held)})")
    return train, held_out, transfer


def make_demos(args: argparse.Namespace, train: list[Task], *, seed: int, console: Console) -> bool:
    """Stage 2: the expert's demonstrations in <work>/demos; False when they were there already."""
    demo_dir = args.work / "demos"
    if (demo_dir / ".complete").is_file():
        return False
    tokenizer = resolve_model(args.model).load_tokenizer()
    _, counts = asyncio.run(demonstrations(train, tokenizer=tokenizer, per_task=1, seed=seed,
                                           agent_config=agent_config(args, temperature=1.0), out_dir=demo_dir,
                                           concurrency=4))
    if not counts["solved"]:
        raise SystemExit(f"the expert solved none of the {len(train)} training tasks: {counts}")
    (demo_dir / ".complete").write_text(json.dumps(counts))
    return True


def make_sft(args: argparse.Namespace, *, seed: int, console: Console) -> bool:
    """Stage 3: the SFT model in <work>/sft/final; False when it was there already."""
    sft_dir = args.work / "sft"
    if (sft_dir / "final" / "config.json").is_file():
        return False
    run_sft(model=args.model, trajectories=load_trajectories([args.work / "demos"]), device=args.device,
            out_dir=sft_dir, config=SFTConfig(epochs=args.sft_epochs, lr=args.sft_lr, batch_sequences=args.sft_batch,
                                              seed=seed), console=console)
    return True


def run_grpo(args: argparse.Namespace, train: list[Task], model: Any, *, steps: int, lr: float, seed: int,
             run_dir: Path) -> None:
    """Stage 4: GRPO from `model` on the training tasks with the plan's recipe settings."""
    recipe = SmolLM2_Recipe(
        num_rollout=steps, rollout_batch_size=args.rollout_batch_size,
        n_samples_per_prompt=args.n_samples, lr=lr, global_batch_size=args.global_batch_size,
        over_sampling_batch_size=args.over_sampling, dynamic_sampling=args.dynamic_sampling,
        lr_warmup_iters=args.lr_warmup,
        rollout_max_response_len=args.max_new_tokens,
        rollout_max_context_len=args.max_context, rollout_temperature=args.rollout_temperature,
        max_open_sandboxes=args.concurrency, seed=seed, save="checkpoints",
        save_interval=steps, extra_config=ExtraConfig(agentic_max_steps=args.max_steps))
    TrainConfig(model=model, dataset=AgentTaskDataset(write_dataset(train, args.work / "train.jsonl")),
                recipe=recipe, run_dir=run_dir, device=args.device).launch()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    work, out = args.work, args.out
    held = tuple(r for r in args.held_out.split(",") if r)
    times: dict[str, float] = json.loads((work / "times.json").read_text()) if (work / "times.json").is_file() else {}
    peaks: dict[str, float] = (json.loads((work / "peak_rss_gib.json").read_text())
                               if (work / "peak_rss_gib.json").is_file() else {})

    def stage(name: str, started: float) -> None:
        times.setdefault(name, round(time.monotonic() - started, 1))
        peaks.setdefault(name, round(peak_rss_gib(), 2))  # the process's peak so far
        (work / "times.json").write_text(json.dumps(times, indent=2))
        (work / "peak_rss_gib.json").write_text(json.dumps(peaks, indent=2))
        return_freed_memory()  # the stage's freed tensors go back before the next stage allocates its own

    t0 = time.monotonic()
    train, held_out, transfer = build_tasks(args, console)
    plan = register(make_plan(args, train=train, held_out=held_out, transfer=transfer), work)
    seeds = plan["seeds"]
    console.print(f"{len(train)} training tasks, {len(held_out)} held-out tasks ({', '.join(held)}), "
                  f"{len(transfer)} transfer tasks; plan {work / 'plan.json'}")
    stage("tasks", t0)

    t0 = time.monotonic()
    if make_demos(args, train, seed=seeds["demos"], console=console):
        stage("demos", t0)

    t0 = time.monotonic()
    if make_sft(args, seed=seeds["sft"], console=console):
        stage("sft", t0)
    sft_model = HFFolder(path=str(work / "sft" / "final"))

    t0 = time.monotonic()
    grpo_dir = work / "grpo"
    if not (grpo_dir / "final" / "config.json").is_file():
        run_grpo(args, train, sft_model, steps=args.grpo_steps, lr=args.grpo_lr, seed=seeds["grpo"], run_dir=grpo_dir)
        stage("grpo", t0)

    results: dict[str, dict[str, Any]] = {}

    def evaluate_held_out(name: str, model: Any) -> None:
        t0 = time.monotonic()
        results[name] = run_eval(model, held_out, args=args, n=args.n, temperature=args.eval_temperature,
                                 seed=seeds["eval"], out=work / f"eval_{name}.json", console=console)
        stage(f"eval_{name}", t0)
        console.print(f"{name}: pass@1 {results[name]['pass@1']:.4f} +- {results[name]['pass@1_stderr'] or 0:.4f}")

    # The hypothesis's two evaluations first, so a run stopped later has already measured what it tests.
    models: dict[str, Any] = {"sft": sft_model, "grpo": HFFolder(path=str(grpo_dir / "final"))}
    for name in ("sft", "grpo"):
        evaluate_held_out(name, models[name])

    t0 = time.monotonic()
    rs_dir = work / "rs"
    if not any((rs_dir / "final" / name).is_file() for name in ("config.json", "NOTHING_SOLVED")):
        tasks, per_task = rs_tasks(train, plan["rs_episodes"])
        sampled = run_eval(sft_model, tasks, args=args, n=per_task, temperature=args.rollout_temperature,
                           seed=seeds["rs_sampling"], out=work / "rs_sampling.json", console=console)
        solved = load_trajectories([work / "rs_sampling"], min_reward=1.0)
        console.print(f"rejection sampling: {len(solved)} solved of {len(tasks) * per_task} episodes")
        if solved:
            run_sft(model=sft_model, trajectories=solved, device=args.device, out_dir=rs_dir,
                    config=SFTConfig(epochs=args.rs_epochs, lr=args.sft_lr, batch_sequences=args.sft_batch,
                                     seed=seeds["rs_sft"]), console=console)
        else:  # nothing to learn from: the baseline is the SFT model itself
            (rs_dir / "final").mkdir(parents=True, exist_ok=True)
            (rs_dir / "final" / "NOTHING_SOLVED").write_text(json.dumps(sampled["statuses"]))
        stage("rs", t0)
    rs_model = sft_model if (rs_dir / "final" / "NOTHING_SOLVED").is_file() else HFFolder(path=str(rs_dir / "final"))

    models.update(rs=rs_model, base=args.model)
    for name in ("rs", "base"):
        evaluate_held_out(name, models[name])
    transfer_results: dict[str, dict[str, Any]] = {}
    if transfer:
        for name in ("sft", "grpo"):
            t0 = time.monotonic()
            transfer_results[name] = run_eval(models[name], transfer, args=args, n=args.n,
                                              temperature=args.eval_temperature, seed=seeds["eval"],
                                              out=work / f"transfer_{name}.json", console=console)
            stage(f"transfer_{name}", t0)

    curve = [(r["step"], r["rollout/reward_mean"], r.get("rollout/mixed_group_frac"))
             for r in map(json.loads, (grpo_dir / "metrics.jsonl").open()) if r.get("kind") == "train"]
    gain = difference(results["sft"], results["grpo"])
    summary: dict[str, Any] = {
        "plan": plan,
        "held_out_tasks": len(held_out), "training_tasks": len(train), "n": args.n,
        **{name: figures(r) for name, r in results.items()},
        "grpo_minus_sft": gain,
        "grpo_minus_rs": difference(results["rs"], results["grpo"]),
        "rs_minus_sft": difference(results["sft"], results["rs"]),
        "sft_minus_base": difference(results["base"], results["sft"]),
        "hypothesis_holds": gain["exceeds_2_stderr"],
        "rs_solved_episodes": len(load_trajectories([work / "rs_sampling"], min_reward=1.0)),
        "reward_curve": curve, "stage_seconds": times, "stage_peak_rss_gib": peaks,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    if transfer_results:
        summary["transfer"] = {**{name: figures(r) for name, r in transfer_results.items()},
                               "grpo_minus_sft": difference(transfer_results["sft"], transfer_results["grpo"])}
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(summary, indent=2, default=str))
    plot(summary, out / "learning.png")
    console.print(json.dumps({k: summary[k] for k in ("base", "sft", "grpo", "rs", "grpo_minus_sft")}, indent=2))
    return 0


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [s + 1 for s, _, _ in summary["reward_curve"]]
    left.plot(steps, [r for _, r, _ in summary["reward_curve"]], marker="o", label="mean reward")
    left.plot(steps, [m or 0.0 for _, _, m in summary["reward_curve"]], marker="x", label="groups with mixed rewards")
    left.set(title="GRPO on the training tasks", xlabel="step", ylim=(0, 1))
    left.legend()
    names = ["base", "sft", "rs", "grpo"]
    values = [summary[n]["pass@1"] or 0.0 for n in names]
    errors = [summary[n]["stderr"] or 0.0 for n in names]
    right.bar(names, values, yerr=errors, capsize=6, color=["#a0aec0", "#4299e1", "#ed8936", "#2f855a"])
    right.set(title=f"held-out pass@1 ({summary['held_out_tasks']} tasks, n={summary['n']})", ylabel="pass@1")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

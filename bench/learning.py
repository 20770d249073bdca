"""Does training make the agent better? Base vs SFT vs GRPO pass@1 on held-out repositories.

    .venv/bin/python bench/learning.py --out docs/results [--n 4] [--grpo-steps 10] [--sft-epochs 2]

Stages (each resumable: a finished stage's output is reused when the script is run again):
  1. tasks     the bundled warm-up tier, split by repository: 4 held-out repositories (40 tasks) are
               never trained on; the other 8 (80 tasks) are the training set
  2. demos     the scripted expert's solved episodes on the training tasks (one each)
  3. sft       supervised fine-tuning of SmolLM2-135M-Instruct on the demonstrations
  4. grpo      GRPO from the SFT model on the training tasks
  5. eval      pass@1 (n episodes per task) of the base, SFT and GRPO models on the held-out tasks
Writes <out>/learning.json (each figure with its standard error over tasks, the paired GRPO - SFT
difference with its standard error, stage wall times, the reward curve, the command) and
<out>/learning.png (the reward curve and the three pass@1 values).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.engines import open_engine, profile_for
from codedojo.agent.evaluation import EvalReport, evaluate
from codedojo.agent.expert import demonstrations
from codedojo.agent.loop import AgentConfig
from codedojo.agent.rollout import RolloutConfig
from codedojo.config import AgentTaskDataset, ExtraConfig, SmolLM2_Recipe, TrainConfig
from codedojo.inference.protocol import SamplingParams
from codedojo.inference.specs import HFFolder, resolve_model
from codedojo.tasks.task import Task, discover_tasks
from codedojo.train.default import builtin_warmup_suite, split_by_repository, write_dataset
from codedojo.train.sft import SFTConfig, load_trajectories, run_sft

HELD_OUT = ("moneybox", "planegeo", "textkit", "unitconv")
MODEL = "smollm2-135m-instruct"


def agent_config(args: argparse.Namespace, *, temperature: float) -> AgentConfig:
    return AgentConfig(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                       max_context_tokens=args.max_context, max_output_chars=2000, prompt_profile=profile_for(MODEL),
                       command_timeout_sec=30, sampling=SamplingParams(temperature=temperature))


def eval_model(model: Any, tasks: list[Task], *, args: argparse.Namespace, out: Path, console: Console) -> dict:
    if out.is_file():
        return json.loads(out.read_text())

    async def go() -> EvalReport:
        engine = await open_engine(model)
        try:
            return await evaluate(tasks, engine=engine, n=args.n, agent_config=agent_config(args, temperature=0.6),
                                  rollout=RolloutConfig(max_open_sandboxes=args.concurrency), seed=7,
                                  trajectory_dir=out.with_suffix(""), console=console)
        finally:
            await engine.close()

    report = asyncio.run(go())
    data = report.to_dict()
    data["per_task_pass@1"] = {t.task: t.pass_at(1) for t in report.tasks}
    out.write_text(json.dumps(data, indent=2))
    return data


def paired_difference(a: dict, b: dict) -> tuple[float, float]:
    """Mean and standard error over tasks of b's pass@1 minus a's."""
    diffs = [b["per_task_pass@1"][t] - a["per_task_pass@1"][t] for t in a["per_task_pass@1"]
             if a["per_task_pass@1"][t] is not None and b["per_task_pass@1"].get(t) is not None]
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return mean, se


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--work", type=Path, default=Path("runs/learning"), help="intermediate files")
    parser.add_argument("--n", type=int, default=4, help="eval episodes per held-out task")
    parser.add_argument("--sft-epochs", type=int, default=3)
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    parser.add_argument("--grpo-steps", type=int, default=12)
    parser.add_argument("--grpo-lr", type=float, default=5e-6)
    parser.add_argument("--rollout-batch-size", type=int, default=4)
    parser.add_argument("--n-samples", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-context", type=int, default=2048)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    console = Console(stderr=True)
    work, out = args.work, args.out
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    if (work / "times.json").is_file():
        times = json.loads((work / "times.json").read_text())

    def stage(name: str, started: float) -> None:
        times[name] = times.get(name) or round(time.monotonic() - started, 1)
        (work / "times.json").write_text(json.dumps(times, indent=2))

    t0 = time.monotonic()
    train, held_out = split_by_repository(discover_tasks([builtin_warmup_suite(console=console)]), held_out=HELD_OUT)
    console.print(f"{len(train)} training tasks, {len(held_out)} held-out tasks ({', '.join(HELD_OUT)})")
    stage("tasks", t0)

    t0 = time.monotonic()
    demo_dir = work / "demos"
    if not (demo_dir / ".complete").is_file():
        tokenizer = resolve_model(MODEL).load_tokenizer()
        _, counts = asyncio.run(demonstrations(train, tokenizer=tokenizer, per_task=1, seed=0,
                                               agent_config=agent_config(args, temperature=1.0), out_dir=demo_dir,
                                               concurrency=4))
        (demo_dir / ".complete").write_text(json.dumps(counts))
        stage("demos", t0)

    t0 = time.monotonic()
    sft_dir = work / "sft"
    if not (sft_dir / "final" / "config.json").is_file():
        run_sft(model=MODEL, trajectories=load_trajectories([demo_dir]), device="cpu", out_dir=sft_dir,
                config=SFTConfig(epochs=args.sft_epochs, lr=args.sft_lr, batch_sequences=8), console=console)
        stage("sft", t0)

    t0 = time.monotonic()
    grpo_dir = work / "grpo"
    if not (grpo_dir / "final" / "config.json").is_file():
        recipe = SmolLM2_Recipe(
            num_rollout=args.grpo_steps, rollout_batch_size=args.rollout_batch_size,
            n_samples_per_prompt=args.n_samples, lr=args.grpo_lr, rollout_max_response_len=args.max_new_tokens,
            rollout_max_context_len=args.max_context, max_open_sandboxes=args.concurrency,
            save="checkpoints", save_interval=args.grpo_steps,
            extra_config=ExtraConfig(agentic_max_steps=args.max_steps, agentic_exec_timeout=30.0))
        TrainConfig(model=HFFolder(path=str(sft_dir / "final")),
                    dataset=AgentTaskDataset(write_dataset(train, work / "train.jsonl")), recipe=recipe,
                    run_dir=grpo_dir, device="cpu").launch()
        stage("grpo", t0)

    results = {}
    for name, model in (("base", MODEL), ("sft", HFFolder(path=str(sft_dir / "final"))),
                        ("grpo", HFFolder(path=str(grpo_dir / "final")))):
        t0 = time.monotonic()
        results[name] = eval_model(model, held_out, args=args, out=work / f"eval_{name}.json", console=console)
        stage(f"eval_{name}", t0)
        console.print(f"{name}: pass@1 {results[name]['pass@1']:.4f} +- {results[name]['pass@1_stderr'] or 0:.4f}")

    curve = [(r["step"], r["rollout/reward_mean"]) for r in map(json.loads, (grpo_dir / "metrics.jsonl").open())
             if r.get("kind") == "train"]
    gain, gain_se = paired_difference(results["sft"], results["grpo"])
    summary = {
        "command": "python bench/learning.py " + shlex.join(sys.argv[1:]),
        "held_out_repositories": list(HELD_OUT), "held_out_tasks": len(held_out), "training_tasks": len(train),
        "n": args.n, "temperature": 0.6,
        **{name: {"pass@1": r["pass@1"], "stderr": r["pass@1_stderr"], f"pass@{args.n}": r.get(f"pass@{args.n}"),
                  "statuses": r["statuses"], "wall_sec": r["wall_sec"]} for name, r in results.items()},
        "grpo_minus_sft": {"mean": gain, "stderr": gain_se, "exceeds_2_stderr": bool(gain > 2 * gain_se)},
        "reward_curve": curve, "stage_seconds": times,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work")},
    }
    (out / "learning.json").write_text(json.dumps(summary, indent=2, default=str))
    plot(summary, out / "learning.png")
    console.print(json.dumps({k: summary[k] for k in ("base", "sft", "grpo", "grpo_minus_sft")}, indent=2))
    return 0


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    steps = [s + 1 for s, _ in summary["reward_curve"]]
    left.plot(steps, [r for _, r in summary["reward_curve"]], marker="o")
    left.set(title="GRPO: mean training reward per step", xlabel="step", ylabel="reward")
    names = ["base", "sft", "grpo"]
    values = [summary[n]["pass@1"] or 0.0 for n in names]
    errors = [summary[n]["stderr"] or 0.0 for n in names]
    right.bar(names, values, yerr=errors, capsize=6, color=["#a0aec0", "#4299e1", "#2f855a"])
    right.set(title=f"held-out pass@1 ({summary['held_out_tasks']} tasks, n={summary['n']})", ylabel="pass@1")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

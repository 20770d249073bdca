"""The embedded default run (`codedojo train` with no arguments): real, short, on one laptop CPU.

1. Tasks: the bundled guided tier (generated once by the task factory and cached), split by
   repository: held-out repositories for evaluation, the rest for training.
2. Warm start: the scripted expert's solved demonstrations on the training tasks, then supervised
   fine-tuning of SmolLM2-135M-Instruct on them (both cached: a second run skips straight to RL).
3. GRPO on the training tasks with local sandboxes; the held-out tasks are evaluated with the base model, the
   warm start and the trained model, and the summary pairs each difference over them.

Everything lands in the run directory; the caches live under $CODEDOJO_CACHE_DIR (default
~/.cache/codedojo).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.budget import EpisodeBudget
from codedojo.cache import cache_dir
from codedojo.config.dataset import task_row
from codedojo.tasks.task import Task, discover_tasks

HELD_OUT_REPOSITORIES = ("moneybox", "planegeo", "textkit", "unitconv")
SUITE_SEED = 0
DEMO_SEED = 0
DEFAULT_MODEL = "smollm2-135m-instruct"
SFT_EPOCHS = 2
SFT_LR = 1.5e-4
SFT_BATCH = 4
"""The warm start: two passes over the demonstrations in steps of four (16 optimizer steps on the 32 training
tasks). One pass over 80 guided demonstrations in steps of four at this rate brought the held-out guided pass@1
at the rollout temperature to 0.30 (docs/training.md; the base model was not measured on that tier)."""
MAIN_JOB_STEPS = 8
"""GRPO steps of the main job: 8 steps of 16 episodes took 15.5 min with both evaluations on the project's 2-core
machine (bf16), which leaves `./dev run` under its 30-minute budget from a fresh clone (docs/training.md)."""
CURRICULUM = "curriculum"
"""`--tier curriculum`: train on the guided, hinted and warm-up tiers with the tier curriculum and evaluate on the
held-out warm-up tasks (finding the fix, not carrying it out)."""
CURRICULUM_TIERS = ("guided", "hinted", "warmup")
CURRICULUM_START = (0.51, 0.26, 0.23)
"""The fourth registered plan's start shares (docs/training.md): in proportion to each tier's chance of a mixed
group at its curriculum SFT model's calibrated pass rates (guided 0.55, hinted 0.14, warm-up 0.11)."""
EVAL_SIZE = (8, 1)
"""Held-out tasks x episodes per task of the main job's evaluations (`--eval-size`). 8 x 1 fits the 30-minute
budget; its paired standard error is about 0.18, so only a gain above ~0.36 reads as beyond noise. The power
calculation (docs/training.md, docs/results/eval-power.json) puts a true +0.15 beyond 2 paired SE about 77% of the
time at 48 x 2 (SE 0.055) and 81% at 40 x 3 (SE 0.052), which the budget does not hold yet (issue 40)."""
STAGE_NAMES = ("base", "after SFT", "after GRPO")
"""What the main job's summary calls the base model, the warm start and the trained model."""
DEFAULT_TIER = "guided"
"""The tier the embedded default trains and evaluates on, chosen by the SFT model's pass rate at the rollout
temperature (docs/training.md): 0.30 +- 0.07 on 40 held-out guided tasks, inside the 20-60% where most GRPO
groups have mixed rewards; warm-up was 0 of 24."""


def builtin_suite(*, console: Console, tier: str = "warmup", per_repo: int = 30, repos: tuple[str, ...] = ()) -> Path:
    """The bundled tasks of `tier`, generated on first use and cached. The factory draws `per_repo` bugs per
    repository and a third of them are warm-up tier (the curriculum tiers restate those): 30 gives 120
    tasks (~5 min on 2 cores), 12 gives 48. `repos` limits it to those bundled repositories (all by default)."""
    from codedojo.tasks.factory.pipeline import BUILTIN_REPOS

    digest = hashlib.sha256()
    factory = Path(__file__).parents[1] / "tasks" / "factory"
    for path in sorted(Path(BUILTIN_REPOS).rglob("*.py")) + sorted(factory.rglob("*.py")):
        digest.update(path.read_bytes())
    scope = "-" + "+".join(sorted(repos)) if repos else ""
    folder = cache_dir() / "builtin" / f"{tier}-seed{SUITE_SEED}-per{per_repo}{scope}-{digest.hexdigest()[:12]}"
    if folder.is_dir() and (folder / ".complete").is_file():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    console.print(f"generating the bundled {tier} tasks into {folder} (once)")
    from codedojo.cli import main as cli_main

    args = ["tasks", "builtin", "--out", str(tmp), "--tier", tier, "--seed", str(SUITE_SEED),
            "--per-repo", str(per_repo), *(arg for repo in sorted(repos) for arg in ("--repo", repo))]
    if cli_main(args) != 0:
        raise RuntimeError(f"`codedojo {' '.join(args)}` failed (its output is above); {tmp} holds what it wrote")
    (tmp / ".complete").write_text("")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def split_by_repository(paths: list[Path], *, held_out: tuple[str, ...]) -> tuple[list[Task], list[Task]]:
    train: list[Task] = []
    evaluation: list[Task] = []
    for path in paths:
        task = Task.load(path)
        (evaluation if task.config.metadata.get("repository") in held_out else train).append(task)
    return train, evaluation


def write_dataset(tasks: list[Task], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [task_row(t.path, instruction=t.instruction, metadata={
        "repository": t.config.metadata.get("repository"), "tier": t.config.metadata.get("tier")}) for t in tasks]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def warm_start(*, model: str, tasks: list[Task], sft_config: Any, budget: EpisodeBudget, device: str,
               console: Console) -> Path:
    """Demonstrations + SFT, cached by (model, tasks, expert seed, episode budget, SFT settings). The
    demonstrations are recorded under the budget RL and evaluation run with (`budget`); a task whose
    demonstration does not fit is left out and named on the console (its reply would be cut in RL)."""
    from codedojo.agent.engines import profile_for
    from codedojo.agent.expert import demonstrations
    from codedojo.agent.loop import AgentConfig
    from codedojo.inference.specs import resolve_model
    from codedojo.train.sft import run_sft

    key = hashlib.sha256(json.dumps([model, sorted(t.name for t in tasks), DEMO_SEED, repr(budget),
                                     repr(sft_config)]).encode()).hexdigest()[:16]
    folder = cache_dir() / "sft" / key
    if (folder / "final" / "config.json").is_file():
        console.print(f"warm start: cached SFT model {folder / 'final'}")
        return folder / "final"
    shutil.rmtree(folder, ignore_errors=True)
    tokenizer = resolve_model(model).load_tokenizer()
    config = AgentConfig(**budget.agent_fields(), prompt_profile=profile_for(model))
    with console.status(f"recording expert demonstrations on {len(tasks)} tasks"):
        demos, counts = asyncio.run(demonstrations(tasks, tokenizer=tokenizer, per_task=1, seed=DEMO_SEED,
                                                   agent_config=config, out_dir=folder / "demonstrations",
                                                   leave_out_over_budget=True))
    console.print(f"warm start: {counts['solved']} solved demonstrations of {counts['episodes']} expert episodes")
    for name, why in counts["left_out"].items():
        console.print(f"warm start: left out {name}: its demonstration does not fit the episode budget ({why})")
    summary = run_sft(model=model, trajectories=demos, config=sft_config, out_dir=folder, device=device,
                      console=console)
    console.print(f"warm start: fine-tuned on {summary['tokens']} tokens in {summary['seconds']} s")
    return Path(summary["final_model"])


def parse_eval_size(text: str) -> tuple[int, int]:
    """`TASKSxN` (e.g. 48x2): held-out tasks and episodes per task, each at least 1."""
    tasks, sep, n = text.lower().partition("x")
    if not sep or not tasks.strip().isdigit() or not n.strip().isdigit() or int(tasks) < 1 or int(n) < 1:
        raise ValueError(f"--eval-size {text!r}: expected TASKSxN with both at least 1, e.g. 48x2 (48 held-out "
                         "tasks, 2 episodes each)")
    return int(tasks), int(n)


def spread(tasks: list[Task], count: int) -> list[Task]:
    """`count` of `tasks` at even intervals (sorted by name, so grouped by repository: a spread over them)."""
    return [tasks[i * len(tasks) // count] for i in range(min(count, len(tasks)))]


def held_out_tasks(tier: str, evaluation: list[Task], count: int, *, console: Console) -> list[Task]:
    """`count` held-out tasks of `tier`: spread over `evaluation` (the main job's suite's held-out share) when it
    has that many, else drawn from a suite of the held-out repositories alone with enough bugs per repository
    (a third of the draws are a tier's, as in the full suite)."""
    if count > len(evaluation):
        per_repo = 3 * -(-count // len(HELD_OUT_REPOSITORIES))
        suite = builtin_suite(console=console, tier=tier, per_repo=per_repo, repos=HELD_OUT_REPOSITORIES)
        evaluation = [Task.load(path) for path in discover_tasks([suite])]
        if count > len(evaluation):
            raise ValueError(f"--eval-size: the held-out repositories have {len(evaluation)} {tier} tasks at "
                             f"{per_repo} draws each, fewer than the {count} asked for; ask for fewer tasks")
    return spread(evaluation, count)


def default_tasks(tier: str, *, console: Console, quick: bool,
                  eval_tasks: int | None = None) -> tuple[list[Task], list[Task], Any]:
    """The main job's training and held-out tasks of `tier` (12 draws per repository), and its curriculum:
    None for one tier; for `CURRICULUM`, every curriculum tier's training tasks, the held-out warm-up tasks and
    the CurriculumConfig. `eval_tasks` held-out tasks spread over the held-out repositories; by default every other
    one of the suite's (8 of 16, `EVAL_SIZE`), every fourth and 8 training tasks a tier with `quick`."""
    from codedojo.config import CurriculumConfig

    tiers = CURRICULUM_TIERS if tier == CURRICULUM else (tier,)
    train: list[Task] = []
    held: list[Task] = []
    for name in tiers:
        suite = builtin_suite(console=console, tier=name, per_repo=12)
        pool, evaluation = split_by_repository(discover_tasks([suite]), held_out=HELD_OUT_REPOSITORIES)
        train += pool[:8] if quick else pool
        if name == tiers[-1]:
            if eval_tasks is None:  # EVAL_SIZE's 8 of the suite's 16
                held = evaluation[::4] if quick else evaluation[::2]
            else:
                held = held_out_tasks(name, evaluation, eval_tasks, console=console)
    if tier != CURRICULUM:
        return train, held, None
    return train, held, CurriculumConfig(tiers=CURRICULUM_TIERS, start=CURRICULUM_START)


def run_default(*, run_dir: Path | None, overrides: dict[str, Any], device: str | None, quick: bool,
                model: str | None, tier: str | None = None, eval_size: tuple[int, int] | None = None) -> Any:
    from codedojo.agent.budget import recipe_budget
    from codedojo.agent.engines import profile_for
    from codedojo.config import AgentTaskDataset, EvalConfig, EvalDataset, EvalDefaults, SmolLM2_Recipe, TrainConfig
    from codedojo.inference.specs import HFFolder, resolve_model
    from codedojo.precision import check_device
    from codedojo.records import record_fields
    from codedojo.train.sft import SFTConfig

    console = Console(stderr=True)
    # The settings are checked before the suite is generated and anything is written.
    device = check_device(device)
    model = model or DEFAULT_MODEL
    resolve_model(model)
    record_fields(SmolLM2_Recipe, overrides, where="--set")
    tier = tier or DEFAULT_TIER
    eval_count, eval_n = eval_size or (None, EVAL_SIZE[1])
    train_tasks, eval_tasks, curriculum = default_tasks(tier, console=console, quick=quick, eval_tasks=eval_count)
    run_dir = run_dir or Path("runs") / time.strftime("default-%Y%m%d-%H%M%S")
    data = run_dir / "data"
    train_path = write_dataset(train_tasks, data / "train.jsonl")
    eval_path = write_dataset(eval_tasks, data / "eval.jsonl")
    num_rollout = int(overrides.get("num_rollout", 1 if quick else MAIN_JOB_STEPS))
    recipe = SmolLM2_Recipe(**{
        # Each step rolls out 4 tasks x 4 episodes and trains on (at most) 2 of the groups with mixed rewards.
        "num_rollout": num_rollout, "rollout_batch_size": 2, "over_sampling_batch_size": 4, "n_samples_per_prompt": 4,
        "curriculum": curriculum, "save": "checkpoints", "save_interval": num_rollout, "eval_interval": num_rollout,
        "eval_config": EvalConfig(defaults=EvalDefaults(temperature=0.6, n_samples_per_eval_prompt=eval_n),
                                  datasets=(EvalDataset(name="held-out", path=str(eval_path)),)),
        **overrides,
    })
    trained_on = ", ".join(curriculum.tiers) + " tiers (a curriculum)" if curriculum else f"{tier} tier"
    console.print(f"embedded default: {len(train_tasks)} training tasks of the {trained_on}, {len(eval_tasks)} "
                  f"held-out tasks x {eval_n} of the {'warmup' if curriculum else tier} tier (repositories "
                  f"{', '.join(HELD_OUT_REPOSITORIES)})")
    sft = SFTConfig(epochs=SFT_EPOCHS, lr=SFT_LR, batch_sequences=SFT_BATCH)
    demo_tasks = train_tasks
    warm = warm_start(model=model, tasks=demo_tasks, sft_config=sft,
                      budget=recipe_budget(recipe, profile=profile_for(model)), device=device, console=console)
    # the base model is evaluated on the same held-out tasks first (cached like the warm start's evaluation), so
    # the summary shows what SFT and what GRPO each added
    config = TrainConfig(model=HFFolder(path=str(warm)), dataset=AgentTaskDataset(train_path), recipe=recipe,
                         run_dir=run_dir, device=device, baseline=model, stage_names=STAGE_NAMES)
    return config.launch()

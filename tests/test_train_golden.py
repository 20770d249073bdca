"""Golden numbers: a fixed seed, the tiny model and scripted rollouts give the same losses and weights after
two optimizer steps as on the tree where they were recorded (74b49e4, before issue 22's refactor of the
update step, its configuration and the trainer's state). A change here means the numbers
of training changed: find out why before updating them.

The recipe turns on every term the update step reads (clip-higher, KL against the reference, entropy,
TIS, gradient clipping, weight decay, cosine decay to a floor) and fixes the precision to fp32, so the
numbers do not depend on whether the CPU has native bf16.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.config import AgentTaskDataset, ExtraConfig, Recipe, TrainConfig, task_row
from codedojo.inference.specs import TinyModel
from codedojo.tasks.task import Task, examples_dir

SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
RIGHT = {"hello-file": "```bash\necho world > hello.txt\n```",
         "fix-add": "```bash\nsed -i '5s/a - b/a + b/' calc.py\n```"}
CHECKED = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
           "model.norm.weight")
"""The tensors whose checksums are recorded (embedding, attention, MLP, a norm)."""


def _script(session_id: str) -> list[str]:
    task = "hello-file" if session_id.startswith("hello-file") else "fix-add"
    right = zlib.crc32(session_id.encode()) % 2 == 0
    return [RIGHT[task] if right else "```bash\nls\n```", SUBMIT]


async def _scripted(loaded: Any) -> ScriptedPolicy:
    return ScriptedPolicy(loaded.tokenizer, _script, logprob=-0.7)


def _launch(tmp: Path) -> Any:
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    rows = [task_row(examples_dir() / name, instruction=Task.load(examples_dir() / name).instruction)
            for name in ("hello-file", "fix-add")]
    dataset = tmp / "data" / "train.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = Recipe(
        num_rollout=2, rollout_batch_size=2, n_samples_per_prompt=4, global_batch_size=8, seed=1234,
        lr=1e-3, min_lr=1e-4, lr_warmup_iters=0, lr_decay_style="cosine", weight_decay=0.01,
        adam_beta1=0.9, adam_beta2=0.98, adam_eps=1e-8, clip_grad=1.0, eps_clip=0.2, eps_clip_high=0.28,
        use_kl_loss=True, kl_loss_coef=0.05, kl_loss_type="k3", entropy_coef=0.01, use_tis=True, tis_clip=2.0,
        rollout_temperature=1.0, max_tokens_per_gpu=2048, log_probs_chunk_size=64, bf16=False,
        rollout_max_response_len=64, rollout_max_context_len=4096, max_open_sandboxes=4,
        extra_config=ExtraConfig(agentic_max_steps=3, skip_eval_before_train=True),
    )
    config = TrainConfig(model=TinyModel(seed=7), dataset=AgentTaskDataset(dataset), recipe=recipe,
                         run_dir=tmp / "run", device="cpu")
    return config.launch(engine_factory=_scripted)


def checksums(run_dir: Path) -> dict[str, list[float]]:
    """Per checked tensor: the sum and the sum of squares of the final weights, and the sum of |change|
    from the initial weights (the last one sees the update itself, not only the initialisation)."""
    initial = TinyModel(seed=7).load().state_dict
    final = load_file(str(run_dir / "final" / "model.safetensors"))
    out = {}
    for name in CHECKED:
        w = final[name].double()
        out[name] = [float(w.sum()), float((w * w).sum()), float((w - initial[name].double()).abs().sum())]
    return out


# recorded on 74b49e4 (CPU, fp32; the same with 1 and 2 threads); re-recorded on the merged issue-22 tree
# when the small profile's worked example became a whole-line `sed -i '8c\\...'` (every prompt's tokens
# changed; the issue-22 refactor itself had left the 74b49e4 numbers exact)
GOLDEN_LOSS = {  # step: (loss, pg_loss, kl, entropy, grad_norm, lr after the step)
    0: (-0.05638003721833229, -0.0009137854794971645, 0.0, 5.546625375747681, 0.002428222680464387, 0.00055),
    1: (-0.05546403490006924, -0.00040876682032831013, 0.008957934798672795, 5.550316333770752,
        0.014549650251865387, 0.0001),
}
GOLDEN_WEIGHTS = {  # tensor: (sum, sum of squares, sum of |change|)
    "model.embed_tokens.weight": [0.728510756209289, 6.552758825888221, 17.686859156818628],
    "model.layers.0.self_attn.q_proj.weight": [1.0537899662886048, 1.6401875262520393, 2.8875892947294233],
    "model.layers.1.mlp.down_proj.weight": [1.6716025360656204, 3.25814365423729, 8.45756689314453],
    "model.norm.weight": [63.93708026409149, 63.87424047099209, 0.06776487827301025],
}


def test_two_steps_give_the_recorded_losses_and_weights(tmp_path: Path) -> None:
    run = _launch(tmp_path)
    rows = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    train = {r["step"]: r for r in rows if r["kind"] == "train"}
    assert sorted(train) == [0, 1] and all(r["train/optimizer_steps"] == 1.0 for r in train.values())
    for step, (loss, pg, kl, entropy, grad_norm, lr) in GOLDEN_LOSS.items():
        r = train[step]
        got = (r["train/loss"], r["train/pg_loss"], r["train/kl"], r["train/entropy"], r["train/grad_norm"],
               r["train/lr"])
        assert got == pytest.approx((loss, pg, kl, entropy, grad_norm, lr), rel=1e-6, abs=1e-9), step
    sums = checksums(run.run_dir)
    assert sums.keys() == GOLDEN_WEIGHTS.keys()
    for name, expected in GOLDEN_WEIGHTS.items():
        (total, squares, change), (total_0, squares_0, change_0) = sums[name], expected
        # the signed sum cancels, so rounding moves it by more than 1e-6 of itself: 3.7e-6 on the embeddings
        # (sum 0.73 over 16k entries) between an AVX2 and an AVX-512 CPU; it is checked to 1e-5 absolute, the
        # sum of squares and the sum of |change| (which sees the update itself) to 1e-6 relative
        assert total == pytest.approx(total_0, rel=1e-6, abs=1e-5), name
        assert (squares, change) == pytest.approx((squares_0, change_0), rel=1e-6), name

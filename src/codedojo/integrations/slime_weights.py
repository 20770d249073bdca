"""Initial weights on slime: the recipe's Megatron checkpoints, or the launcher's HF -> torch_dist conversion.

slime trains from Megatron checkpoints only: its actor asserts `args.load` while building the model
(backends/megatron_utils/model.py, at 624b824a), after the SGLang engines have started, and its argument
check falls back from `--load` to `--ref-load` when `--load` holds no checkpoint yet
(utils/arguments.py `slime_validate_args`). So the rendered command always has both:

| flag | value |
|---|---|
| `--ref-load` | `recipe.ref_load`, else the conversion's output |
| `--load` | `recipe.load`, else `recipe.save` (a run that saved resumes from it), else the `--ref-load` value |

The conversion is slime's `tools/convert_hf_to_torch_dist.py` under `torchrun` with the recipe's
conversion parallel sizes (one process per GPU of the conversion layout), the same MODEL_ARGS as
training, `--hf-checkpoint` and `--save <output>`. The output folder is
`<conversion_dir>/<checkpoint slug>-tp<T>-pp<P>`, one per model and layout; the step is skipped when it
already holds `latest_checkpointed_iteration.txt`, which the tool writes only once the checkpoint is
complete. A recipe with neither a checkpoint nor conversion sizes has nothing to load and is refused
before anything starts (`missing_weights`).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from codedojo.config.recipe import Recipe

DEFAULT_MEGATRON_ROOT = "/root/Megatron-LM"
"""Where Megatron-LM is checked out on the cluster (slime's images put it there)."""
TRACKER_FILE = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True, kw_only=True)
class Conversion:
    """The launcher's HF -> torch_dist step, run before training unless its output is already complete."""

    hf_checkpoint: str
    output: str
    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int

    @property
    def num_processes(self) -> int:
        return self.tensor_model_parallel_size * self.pipeline_model_parallel_size

    def flags(self, *, model_args: tuple[str, ...]) -> list[str]:
        """The tool's flags (Megatron's parser plus --hf-checkpoint)."""
        return [*model_args, "--hf-checkpoint", self.hf_checkpoint, "--save", self.output,
                "--tensor-model-parallel-size", str(self.tensor_model_parallel_size),
                "--pipeline-model-parallel-size", str(self.pipeline_model_parallel_size)]

    def shell(self, *, slime_root: str, megatron_root: str, model_args: tuple[str, ...]) -> str:
        """One bash statement: convert unless the output is complete (its exit status fails the job)."""
        tool = f"{slime_root.rstrip('/')}/tools/convert_hf_to_torch_dist.py"
        run = shlex.join(["torchrun", "--nproc-per-node", str(self.num_processes), tool,
                          *self.flags(model_args=model_args)])
        done = shlex.quote(f"{self.output.rstrip('/')}/{TRACKER_FILE}")
        return f'if [ ! -f {done} ]; then PYTHONPATH={shlex.quote(megatron_root)}:"${{PYTHONPATH:-}}" {run}; fi'


@dataclass(frozen=True, kw_only=True)
class InitialWeights:
    load: str
    ref_load: str
    conversion: Conversion | None


def checkpoint_slug(hf_checkpoint: str) -> str:
    """A folder name for a checkpoint: `org--name` for a hub id, `<folder>-<hash of the path>` for a folder."""
    if hf_checkpoint.startswith(("/", ".", "~")):
        digest = hashlib.sha256(hf_checkpoint.encode()).hexdigest()[:8]
        return f"{PurePosixPath(hf_checkpoint).name or 'model'}-{digest}"
    return hf_checkpoint.replace("/", "--")


def missing_weights(recipe: Recipe) -> str | None:
    """Why `recipe` has nothing slime could load, or None."""
    if recipe.load or recipe.ref_load:
        return None
    sizes = (recipe.conversion_tensor_model_parallel_size, recipe.conversion_pipeline_model_parallel_size)
    if None in sizes:
        return ("no loadable weights: ref_load and load are empty and conversion_tensor_model_parallel_size / "
                "conversion_pipeline_model_parallel_size are not both set, so nothing converts the HF checkpoint "
                "to torch_dist (slime's actor asserts --load); set ref_load to a torch_dist checkpoint or both "
                "conversion sizes")
    return None


def initial_weights(recipe: Recipe, *, hf_checkpoint: str) -> InitialWeights:
    """--load / --ref-load and the conversion that produces them (call after `missing_weights` is None)."""
    conversion = None
    ref_load = recipe.ref_load or ""
    if not ref_load and not recipe.load:
        tp = int(recipe.conversion_tensor_model_parallel_size or 1)
        pp = int(recipe.conversion_pipeline_model_parallel_size or 1)
        output = f"{recipe.conversion_dir.rstrip('/')}/{checkpoint_slug(hf_checkpoint)}-tp{tp}-pp{pp}"
        conversion = Conversion(hf_checkpoint=hf_checkpoint, output=output, tensor_model_parallel_size=tp,
                                pipeline_model_parallel_size=pp)
        ref_load = output
    load = recipe.load or recipe.save or ref_load
    return InitialWeights(load=load, ref_load=ref_load, conversion=conversion)

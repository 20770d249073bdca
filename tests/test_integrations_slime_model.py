"""MODEL_ARGS from config.json: golden tests against slime's own model scripts (recorded at 624b824a, see
tests/fixtures/slime_624b824a/README.md), the tutorial's model, refusals that name the fields, and reading
config.json from a folder and from the HF cache layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codedojo.integrations.slime_model import ModelArgsError, load_hf_config, model_args, number

FIXTURES = Path(__file__).parent / "fixtures" / "slime_624b824a"
SCRIPTS: dict[str, list[str]] = json.loads((FIXTURES / "model_scripts.json").read_text())["model_args"]


def hf_config(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "hf_configs" / f"{name}.json").read_text())


def as_flags(tokens: list[str] | tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """--flag -> its values; numbers compared by value (slime writes 1e-6 and 1e-06, 8.0 and 8)."""
    flags: dict[str, tuple[str, ...]] = {}
    name = None
    for token in tokens:
        if token.startswith("--"):
            assert token not in flags, f"{token} twice"
            name = token
            flags[name] = ()
        else:
            assert name is not None
            flags[name] += (_canonical(token),)
    return flags


def _canonical(token: str) -> str:
    try:
        return repr(float(token))
    except ValueError:
        return token


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_model_args_match_slimes_script(name: str) -> None:
    derived = model_args(hf_config(name))
    assert as_flags(derived.flags) == as_flags(SCRIPTS[name])


def test_the_golden_set_covers_every_family() -> None:
    families = {model_args(hf_config(name)).family for name in SCRIPTS}
    assert families == {"llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_5"}


def test_the_tutorials_model_renders_like_slimes_qwen3_5_27b_script() -> None:
    derived = model_args(hf_config("qwen3.6-27B"))
    assert derived.family == "qwen3_5" and derived.num_layers == 64
    flags = as_flags(derived.flags)
    assert flags["--spec"] == ("slime_plugins.models.qwen3_5", "get_qwen3_5_spec")
    assert flags["--rotary-percent"] == ("0.25",) and "--attention-output-gate" in flags
    assert "--use-gated-attention" in flags and "--untie-embeddings-and-output-weights" in flags
    assert flags == as_flags(SCRIPTS["qwen3.5-27B"])


def test_a_text_only_qwen3_5_config_maps_the_same() -> None:
    nested = hf_config("qwen3.5-9B")
    flat = {**nested["text_config"]}
    assert model_args(flat).flags == model_args(nested).flags


def test_moe_layer_frequency_follows_dense_layers_and_sparse_step() -> None:
    config = {**hf_config("qwen3-30B-A3B"), "num_hidden_layers": 4, "mlp_only_layers": [0]}
    assert as_flags(model_args(config).flags)["--moe-layer-freq"] == ("[0,1,1,1]",)
    config = {**config, "mlp_only_layers": [], "decoder_sparse_step": 2}
    assert as_flags(model_args(config).flags)["--moe-layer-freq"] == ("[0,1,0,1]",)


def test_an_unknown_family_is_refused_with_the_fields_no_mapping_places() -> None:
    config = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "kv_lora_rank": 512,
              "q_lora_rank": 1536, "n_routed_experts": 256, "torch_dtype": "bfloat16"}
    with pytest.raises(ModelArgsError) as error:
        model_args(config)
    message = str(error.value)
    assert "'deepseek_v3' has no Megatron mapping" in message
    assert "kv_lora_rank, n_routed_experts, q_lora_rank" in message
    assert "hidden_size" not in message.split("could place:")[1]  # placed fields are not blamed


@pytest.mark.parametrize(("name", "changes", "named"), [
    ("qwen3-8B", {"attention_bias": True}, "attention_bias=True"),
    ("qwen3-8B", {"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ("qwen3-8B", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling="),
    ("qwen2.5-7B", {"use_sliding_window": True}, "use_sliding_window=True"),
    ("qwen2.5-7B", {"head_dim": 64}, "head_dim differs"),
    ("llama3.1-8B-Instruct", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
     "rope_scaling.low_freq_factor=2.0"),
    ("qwen3-30B-A3B", {"norm_topk_prob": False}, "norm_topk_prob=False"),
    ("qwen3.5-27B", {"text_config": {**hf_config("qwen3.5-27B")["text_config"], "attn_output_gate": False}},
     "attn_output_gate=False"),
    ("qwen3-8B", {"num_hidden_layers": None}, "num_hidden_layers is missing"),
])
def test_values_megatron_cannot_express_are_refused_by_name(name: str, changes: dict[str, Any], named: str) -> None:
    with pytest.raises(ModelArgsError, match=named.replace("(", r"\(").replace("[", r"\[")):
        model_args({**hf_config(name), **changes})


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ModelArgsError) as error:
        model_args({**hf_config("qwen3-8B"), "attention_bias": True, "hidden_act": "relu"})
    assert "attention_bias=True" in str(error.value) and "hidden_act='relu'" in str(error.value)


def test_numbers_render_as_megatron_parses_them() -> None:
    assert [number(1000000.0), number(1e-06), number(0.25), number(8.0), number(151936)] == [
        "1000000", "1e-06", "0.25", "8", "151936"]


def test_config_json_is_read_from_a_folder_or_the_hf_cache(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf_config("qwen3-0.6B")))
    assert load_hf_config(str(folder))["model_type"] == "qwen3"
    with pytest.raises(ModelArgsError, match=r"no config\.json"):
        load_hf_config(str(tmp_path))
    # The hub cache layout huggingface_hub reads offline: models--org--name/{refs/main, snapshots/<rev>/}.
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3.6-27B" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(hf_config("qwen3.6-27B")))
    (tmp_path / "hub" / "models--Qwen--Qwen3.6-27B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Qwen--Qwen3.6-27B" / "refs" / "main").write_text("a" * 40)
    assert load_hf_config("Qwen/Qwen3.6-27B", cache_dir=str(tmp_path / "hub"))["model_type"] == "qwen3_5"


def test_a_repo_id_that_cannot_be_read_is_refused_with_the_fix(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelArgsError, match=r"cannot read config\.json of 'Qwen/Nothing-1B'.*huggingface-cli"):
        load_hf_config("Qwen/Nothing-1B", cache_dir=str(tmp_path))

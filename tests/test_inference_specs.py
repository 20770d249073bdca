"""Model specs and tokenizers: names resolve, unknown and remote-only models fail clearly, the byte
tokenizer round-trips, the Qwen3-style template drops past reasoning, HF folders load."""

from __future__ import annotations

import pytest
import torch

from codedojo.inference import (
    QWEN3_6_27B,
    HFFolder,
    LocalEngine,
    RemoteModel,
    SmolLM2Instruct,
    TinyModel,
    UnknownModelError,
    resolve_model,
)


def test_names_resolve_to_specs(tmp_path) -> None:
    assert resolve_model("tiny-llama") == TinyModel(architecture="llama")
    assert resolve_model("TINY-QWEN3") == TinyModel(architecture="qwen3")
    assert resolve_model("smollm2") == SmolLM2Instruct()
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == SmolLM2Instruct()
    assert resolve_model("Qwen/Qwen3.6-27B") is QWEN3_6_27B
    assert resolve_model(str(tmp_path)) == HFFolder(path=str(tmp_path))
    spec = TinyModel(num_layers=1)
    assert resolve_model(spec) is spec
    with pytest.raises(UnknownModelError, match="tiny-llama"):
        resolve_model("gpt-17")


def test_remote_only_and_broken_models_fail_clearly(tmp_path) -> None:
    assert isinstance(QWEN3_6_27B, RemoteModel) and QWEN3_6_27B.tool_call_parser == "qwen3_coder"
    with pytest.raises(UnknownModelError, match="SGLang or vLLM"):
        QWEN3_6_27B.load()
    with pytest.raises(UnknownModelError, match="HTTPEngine"):
        LocalEngine.from_spec("qwen3.6-27b")
    with pytest.raises(UnknownModelError, match=r"no config\.json"):
        HFFolder(path=str(tmp_path)).load()
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    with pytest.raises(UnknownModelError, match="GPT2LMHeadModel"):
        HFFolder(path=str(tmp_path)).load()


def test_byte_tokenizer_round_trips_and_has_chatml_ids() -> None:
    tokenizer = TinyModel().load_tokenizer()
    text = "héllo\n\tworld <think>x</think> ✓"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    assert tokenizer.eos_token_id == 2
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_qwen3_template_drops_reasoning_of_past_turns_only() -> None:
    tokenizer = TinyModel(architecture="qwen3").load_tokenizer()
    reply = "<think>\nlook first\n</think>\n\nls -la"
    turn1 = [{"role": "user", "content": "task"}, {"role": "assistant", "content": reply}]
    turn2 = [*turn1, {"role": "user", "content": "file.txt"}]
    first = tokenizer.apply_chat_template(turn1, tokenize=False)
    second = tokenizer.apply_chat_template(turn2, tokenize=False, add_generation_prompt=True)
    assert "look first" in first
    assert "look first" not in second and "<|im_start|>assistant\nls -la<|im_end|>" in second
    assert not second.startswith(first)  # re-rendering rewrites history: agent loops must append tokens
    no_think = tokenizer.apply_chat_template(turn2, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_hf_folder_round_trip_gives_the_same_model(tmp_path) -> None:
    tiny = TinyModel(architecture="qwen3").load()
    tiny.hf_model().save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    folder = HFFolder(path=str(tmp_path)).load()
    assert folder.tokenizer.chat_template == tiny.tokenizer.chat_template
    ids = torch.tensor([[1, 50, 60, 70]])
    with torch.no_grad():
        torch.testing.assert_close(folder.hf_model()(input_ids=ids).logits, tiny.hf_model()(input_ids=ids).logits)


def test_parameter_counts_match_the_weights(tmp_path) -> None:
    for spec in (TinyModel(), TinyModel(architecture="qwen3", num_layers=3)):
        loaded = spec.load()
        assert spec.num_parameters == sum(p.numel() for p in loaded.hf_model().parameters())
    loaded = TinyModel(architecture="qwen3").load()
    loaded.hf_model().save_pretrained(tmp_path)
    assert HFFolder(path=str(tmp_path)).num_parameters == TinyModel(architecture="qwen3").num_parameters
    assert SmolLM2Instruct().num_parameters == 134_515_008 and QWEN3_6_27B.num_parameters == 27_000_000_000


def test_tiny_models_are_seeded_and_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = TinyModel(seed=1).load().state_dict
    assert torch.equal(torch.rand(3), expected)
    b = TinyModel(seed=1).load().state_dict
    c = TinyModel(seed=2).load().state_dict
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(a[name], b[name]) and not torch.equal(a[name], c[name])


def test_smollm2_cache_location_follows_the_environment(monkeypatch, tmp_path) -> None:
    from codedojo.cache import cache_dir
    from codedojo.inference.checkpoints import smollm2_gguf

    monkeypatch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("CODEDOJO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "codedojo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert str(cache_dir()).endswith(".cache/codedojo")
    assert smollm2_gguf().name == "SmolLM2-135M-Instruct.Q4_1.gguf"

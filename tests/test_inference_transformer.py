"""Our packed, KV-cached forward against the Hugging Face forward of the same weights."""

from __future__ import annotations

import copy

import pytest
import torch

from codedojo.inference.kv_cache import KVCache
from codedojo.inference.options import EngineOptions
from codedojo.inference.specs import TinyModel
from codedojo.inference.step_batch import _split_runs, build_step
from codedojo.inference.transformer import Transformer, TransformerConfig, rope_frequencies
from codedojo.precision import native_bf16


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def models(request: pytest.FixtureRequest):
    loaded = TinyModel(architecture=request.param, num_layers=3, max_positions=512).load()
    return loaded.engine_model(), loaded.hf_model()


def reference_logits(hf, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(input_ids=torch.tensor([tokens])).logits[0]  # [seq, vocab]


def test_ragged_prefill_chunks_and_decode_runs_match_hf(models) -> None:
    ours, hf = models
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(5, 261, (n,), generator=g).tolist() for n in (17, 60, 33, 9)]
    cache = KVCache(ours.kv_shape, rows=4, capacity=128)
    # Step 1: rows 0, 2, 3 prefill whole prompts; row 1 only its first 25 tokens (a chunk).
    step = build_step(
        [],
        prefills=[(0, 0, seqs[0]), (1, 0, seqs[1][:25]), (2, 0, seqs[2]), (3, 0, seqs[3])],
        sample_tokens=[16, 17 + 25 + 32, 17 + 25 + 33 + 8],
        device="cpu",
    )
    first = ours.forward(step, cache)
    # Step 2: rows 0, 2, 3 decode (two runs: row 0, rows 2-3) while row 1 prefills the rest.
    new = [7, 8, 9]
    step = build_step(
        [(0, 17, new[0]), (2, 33, new[1]), (3, 9, new[2])],
        prefills=[(1, 25, seqs[1][25:])],
        sample_tokens=[0, 1, 2, 3 + 35 - 1],
        device="cpu",
    )
    assert len(step.decode_runs) == 2
    second = ours.forward(step, cache)
    for out, row in zip(first, (0, 2, 3), strict=True):
        torch.testing.assert_close(out, reference_logits(hf, seqs[row])[-1], atol=1e-4, rtol=0)
    for out, (row, token) in zip(second[:3], zip((0, 2, 3), new, strict=True), strict=True):
        torch.testing.assert_close(out, reference_logits(hf, [*seqs[row], token])[-1], atol=1e-4, rtol=0)
    torch.testing.assert_close(second[3], reference_logits(hf, seqs[1])[-1], atol=1e-4, rtol=0)


def test_decode_rows_of_very_different_lengths_split_into_runs_and_match_hf(models) -> None:
    ours, hf = models
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(5, 261, (n,), generator=g).tolist() for n in (300, 300, 6, 9)]
    cache = KVCache(ours.kv_shape, rows=4, capacity=384)
    prefill = build_step([], prefills=[(r, 0, s) for r, s in enumerate(seqs)], sample_tokens=[299], device="cpu")
    ours.forward(prefill, cache)
    new = [11, 12, 13, 14]
    step = build_step([(r, len(s), t) for r, (s, t) in enumerate(zip(seqs, new, strict=True))],
                      prefills=[], sample_tokens=[0, 1, 2, 3], device="cpu")
    # The long rows share one run (equal lengths: no mask), the short ones another (masked).
    assert [(run.row_start, run.row_stop) for run in step.decode_runs] == [(0, 2), (2, 4)]
    assert step.decode_runs[0].mask is None and step.decode_runs[1].mask is not None
    logits = ours.forward(step, cache)
    for row in range(4):
        torch.testing.assert_close(logits[row], reference_logits(hf, [*seqs[row], new[row]])[-1], atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("rows", "lengths", "expected"),
    [
        ([0, 1], [100, 90], [(0, 2)]),  # close lengths: one call, a few masked reads
        ([0, 1, 2, 3], [900, 900, 50, 60], [(0, 2), (2, 4)]),
        ([0, 1, 5, 6], [50, 50, 50, 50], [(0, 2), (2, 4)]),  # rows 1 and 5 are not contiguous
        ([3], [7], [(0, 1)]),
        ([], [], []),
    ],
)
def test_split_runs_trades_masked_reads_for_calls(rows, lengths, expected) -> None:
    decode = [(row, length - 1, 0) for row, length in zip(rows, lengths, strict=True)]
    assert _split_runs(decode) == expected


def test_split_runs_off_the_cpu_keeps_one_call_per_stretch() -> None:
    decode = [(0, 999, 0), (1, 9, 0), (2, 999, 0), (5, 9, 0)]
    assert _split_runs(decode) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert _split_runs(decode, float("inf")) == [(0, 3), (3, 4)]
    runs = build_step(decode, prefills=[], sample_tokens=[], device="meta").decode_runs
    assert [(run.row_start, run.row_stop) for run in runs] == [(0, 3), (5, 6)]


def test_split_runs_cost_threshold() -> None:
    # Splitting [L, s] saves L - s masked reads and costs one call: worth it past the call's cost.
    cost = EngineOptions().run_call_cost
    just_below = [(0, 999, 0), (1, 999 - cost + 1, 0)]
    just_above = [(0, 999, 0), (1, 999 - cost - 1, 0)]
    assert _split_runs(just_below) == [(0, 2)]
    assert _split_runs(just_above) == [(0, 1), (1, 2)]


def test_partial_weight_update_changes_only_named_weights(models) -> None:
    ours, hf = models
    tokens = list(range(5, 40))

    def last_logits() -> torch.Tensor:
        cache = KVCache(ours.kv_shape, rows=1, capacity=64)
        step = build_step([], prefills=[(0, 0, tokens)], sample_tokens=[len(tokens) - 1], device="cpu")
        return ours.forward(step, cache)[0]

    before_update = last_logits()  # builds the kernel-layout copies of the weights
    name = "model.layers.0.self_attn.k_proj.weight"
    before = ours.layers[1].qkv.clone()
    replacement = torch.zeros_like(hf.state_dict()[name])
    ours.load_state_dict({name: replacement}, strict=False)
    q_rows = ours.config.num_heads * ours.config.head_dim
    kv_rows = ours.config.num_kv_heads * ours.config.head_dim
    assert torch.all(ours.layers[0].qkv[q_rows : q_rows + kv_rows] == 0)
    assert torch.equal(ours.layers[1].qkv, before)
    # The forward runs on kernel-layout copies of the weights: they must follow the update.
    changed = copy.deepcopy(hf)
    changed.load_state_dict({**hf.state_dict(), name: replacement})
    after_update = last_logits()
    torch.testing.assert_close(after_update, reference_logits(changed, tokens)[-1], atol=1e-4, rtol=0)
    assert not torch.allclose(after_update, before_update, atol=1e-3)
    ours.load_state_dict(hf.state_dict())  # restore for the other tests


def test_one_token_steps_run_on_the_plain_matrices_and_follow_weight_updates(models) -> None:
    ours, hf = models
    tokens = list(range(5, 40))

    def decode_logits() -> torch.Tensor:  # a 34-token prefill (packed matrices), then a 1-token step (plain)
        cache = KVCache(ours.kv_shape, rows=1, capacity=64)
        ours.forward(build_step([], prefills=[(0, 0, tokens[:-1])], sample_tokens=[0], device="cpu"), cache)
        return ours.forward(build_step([(0, len(tokens) - 1, tokens[-1])], prefills=[], sample_tokens=[0],
                                       device="cpu"), cache)[0]

    torch.testing.assert_close(decode_logits(), reference_logits(hf, tokens)[-1], atol=1e-4, rtol=0)
    name = "model.layers.1.mlp.down_proj.weight"
    changed = copy.deepcopy(hf)
    changed.load_state_dict({**hf.state_dict(), name: hf.state_dict()[name] * -1})
    ours.load_state_dict({name: changed.state_dict()[name]}, strict=False)
    torch.testing.assert_close(decode_logits(), reference_logits(changed, tokens)[-1], atol=1e-4, rtol=0)
    ours.load_state_dict(hf.state_dict())  # restore for the other tests


def test_first_chunks_attend_with_the_causal_flag_and_match_the_masked_path(models) -> None:
    """Prefill chunks with no past use SDPA's causal flag (`EngineOptions.causal_first_chunks`): every position's
    logits equal those of the explicit mask, beside a chunk with a past in the same step."""
    ours, _ = models
    seqs = [list(range(5, 75)), list(range(9, 49))]

    def run(causal: bool) -> torch.Tensor:
        ours.options = EngineOptions(causal_first_chunks=causal)
        cache = KVCache(ours.kv_shape, rows=2, capacity=128)
        ours.forward(build_step([], prefills=[(1, 0, seqs[1][:20])], sample_tokens=[0], device="cpu"), cache)
        step = build_step([], prefills=[(0, 0, seqs[0]), (1, 20, seqs[1][20:])], sample_tokens=list(range(90)),
                          device="cpu")
        return ours.forward(step, cache)

    try:
        torch.testing.assert_close(run(True), run(False), atol=1e-6, rtol=0)
    finally:
        ours.options = EngineOptions()


@pytest.mark.parametrize("threads", [1, 2])
def test_one_token_path_matches_the_general_path_and_hf(models, threads: int) -> None:
    """A one-token step takes `_one_token_layers` (row norms from a dot product, RoPE as a matmul, K/V written by
    plain indexing, the residual adds fused into oneDNN's o and down projections at 2 threads): the logits and
    every K/V it writes equal the general path's to fp32 rounding, here on row 1 of a two-row cache."""
    ours, hf = models
    tokens = list(range(5, 45))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        def run(one_token: bool) -> tuple[list[torch.Tensor], KVCache]:
            ours.options = EngineOptions(one_token_path=one_token)
            cache = KVCache(ours.kv_shape, rows=2, capacity=64)
            ours.forward(build_step([], prefills=[(1, 0, tokens[:36])], sample_tokens=[0], device="cpu"), cache)
            logits = [ours.forward(build_step([(1, position, tokens[position])], prefills=[], sample_tokens=[0],
                                              device="cpu"), cache)[0] for position in range(36, 40)]
            return logits, cache

        lean, lean_cache = run(True)
        general, general_cache = run(False)
    finally:
        ours.options = EngineOptions()
        torch.set_num_threads(before)
    for ours_logits, theirs in zip(lean, general, strict=True):
        torch.testing.assert_close(ours_logits, theirs, atol=2e-5, rtol=0)
    for mine, theirs in zip(lean_cache.keys + lean_cache.values, general_cache.keys + general_cache.values,
                            strict=True):
        torch.testing.assert_close(mine[:, :, :40], theirs[:, :, :40], atol=1e-5, rtol=0)
    torch.testing.assert_close(lean[-1], reference_logits(hf, tokens[:40])[-1], atol=1e-4, rtol=0)


def test_wrapped_calls_see_every_kind_of_call_and_are_undone(models) -> None:
    """`Transformer.wrapped_calls` (what bench/engine_bounds.py times with) routes each kind of call of a step on
    the general layers through the wrapper, leaves the logits as they were, and puts every kernel back, also
    when the step raises."""
    from codedojo.inference import transformer

    ours, _ = models
    seen: dict[str, int] = {}

    def count(kind: str, call):  # type: ignore[no-untyped-def]
        def wrapped(*args):  # type: ignore[no-untyped-def]
            seen[kind] = seen.get(kind, 0) + 1
            return call(*args)
        return wrapped

    def step() -> torch.Tensor:
        cache = KVCache(ours.kv_shape, rows=2, capacity=64)
        ours.forward(build_step([], prefills=[(0, 0, list(range(5, 25)))], sample_tokens=[19], device="cpu"), cache)
        return ours.forward(build_step([(0, 20, 7)], prefills=[(1, 0, list(range(9, 19)))], sample_tokens=[0],
                                       device="cpu"), cache)

    kernels = ours._linear, ours._head_linear, ours._attention, transformer.rms_norm
    plain = step()
    with ours.wrapped_calls(count):
        wrapped = step()
    layers = ours.config.num_layers
    assert seen == {"layer_matmuls": 2 * 4 * layers, "head": 2, "attention": 2 * layers,
                    "rms_norm": 2 * (2 * layers + 1) + (4 * layers if ours.config.qk_norm else 0)}
    torch.testing.assert_close(wrapped, plain, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="boom"), ours.wrapped_calls(count):
        raise RuntimeError("boom")
    assert (ours._linear, ours._head_linear, ours._attention, transformer.rms_norm) == kernels


def test_setting_options_switches_the_weight_layout_between_steps(models) -> None:
    """`packed_weights=False` multiplies the HF-layout matrices themselves (the packed copies are dropped when
    the layout changes, kept when another switch changes): the same logits to fp32 rounding. (A 30-token step
    takes the packed copies only with the few-row kernels off.)"""
    ours, _ = models

    def step() -> torch.Tensor:
        cache = KVCache(ours.kv_shape, rows=1, capacity=64)
        return ours.forward(build_step([], prefills=[(0, 0, list(range(5, 35)))], sample_tokens=list(range(30)),
                                       device="cpu"), cache)

    try:
        ours.options = EngineOptions(native_rows_max_tokens=0)
        packed = step()
        copies = ours._packed
        ours.options = ours.options.updated(one_token_path=False)
        assert ours._packed is copies
        ours.options = ours.options.updated(packed_weights=False)
        plain = step()
        assert ours._packed is not None and ours._packed[0].qkv is ours.layers[0].qkv
    finally:
        ours.options = EngineOptions()
    torch.testing.assert_close(plain, packed, atol=1e-5, rtol=0)


# bf16 engine vs the fp32 HF forward on the 3-layer tiny models: |logprob difference| over the whole
# vocabulary at every position of the ragged prefill + decode step below. Measured 2026-12-01 (torch 2.13,
# an AVX2 CPU that emulates bf16): worst 3.0e-3 (llama) and 4.9e-3 (qwen3), mean 4.5e-4 and 6.3e-4; after
# the weight update below 2.3e-3 and 2.7e-3. The bounds leave 2-3x for other kernels' summation orders.
TINY_BF16_LOGPROB_MAX = 1e-2
TINY_BF16_LOGPROB_MEAN = 2e-3


@pytest.fixture(scope="module", params=[("llama", False), ("qwen3", False), ("llama", True), ("qwen3", True)],
                ids=["llama-bf16", "qwen3-bf16", "llama-wide-fp32", "qwen3-wide-fp32"])
def bf16_models(request: pytest.FixtureRequest):
    """bf16 engines both ways: every matmul in bf16 (CUDA, CPUs with native bf16), and steps wider than
    EMULATED_BF16_MAX_TOKENS on fp32 copies of the bf16 matrices (the default where bf16 is emulated)."""
    architecture, wide = request.param
    loaded = TinyModel(architecture=architecture, num_layers=3, max_positions=512).load()
    inv_freq, scaling = rope_frequencies(loaded.hf_config)
    model = Transformer(TransformerConfig.from_hf(loaded.hf_config), inv_freq=inv_freq, attention_scaling=scaling,
                        dtype=torch.bfloat16, options=EngineOptions(wide_steps_fp32=wide))
    model.load_state_dict(loaded.state_dict)
    return model, loaded.hf_model()


def test_bf16_engine_keeps_norms_embeddings_head_and_logits_in_fp32(bf16_models) -> None:
    ours, _ = bf16_models
    layer = ours.layers[0]
    assert {layer.qkv.dtype, layer.o.dtype, layer.gate_up.dtype, layer.down.dtype} == {torch.bfloat16}
    assert {layer.input_norm.dtype, layer.post_norm.dtype, ours.norm.dtype, ours.embed.dtype,
            ours.lm_head.dtype} == {torch.float32}
    assert ours.kv_shape.dtype == torch.bfloat16
    cache = KVCache(ours.kv_shape, rows=1, capacity=64)
    step = build_step([], prefills=[(0, 0, list(range(5, 30)))], sample_tokens=[24], device="cpu",
                      dtype=ours.dtype)
    assert ours.forward(step, cache).dtype == torch.float32
    assert ours._packed is not None
    wide = ours._packed[0]
    assert wide.qkv.dtype == (torch.float32 if ours.wide_steps_fp32 else torch.bfloat16)
    if ours.wide_steps_fp32:  # the fp32 copies hold the bf16-rounded values
        torch.testing.assert_close(wide.down.to_dense() if wide.down.is_mkldnn else wide.down,
                                   layer.down.float(), atol=0, rtol=0)


def test_engine_model_widens_exactly_where_bf16_is_emulated() -> None:
    loaded = TinyModel().load()
    assert loaded.engine_model(dtype=torch.bfloat16).wide_steps_fp32 == (not native_bf16("cpu"))
    assert not loaded.engine_model().wide_steps_fp32


def test_bf16_engine_logprobs_stay_within_the_stated_bound_of_the_fp32_forward(bf16_models) -> None:
    ours, hf = bf16_models
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(5, 261, (n,), generator=g).tolist() for n in (40, 90, 25)]
    cache = KVCache(ours.kv_shape, rows=3, capacity=128)
    prefill = build_step([], prefills=[(r, 0, s) for r, s in enumerate(seqs)],
                         sample_tokens=list(range(sum(len(s) for s in seqs))), device="cpu", dtype=ours.dtype)
    logits = ours.forward(prefill, cache)
    new = [7, 8, 9]
    decode = build_step([(r, len(s), t) for r, (s, t) in enumerate(zip(seqs, new, strict=True))], prefills=[],
                        sample_tokens=[0, 1, 2], device="cpu", dtype=ours.dtype)
    decoded = ours.forward(decode, cache)
    gaps, start = [], 0
    for row, seq in enumerate(seqs):
        reference = torch.log_softmax(reference_logits(hf, [*seq, new[row]]), dim=-1)
        got = torch.log_softmax(torch.cat((logits[start : start + len(seq)], decoded[row : row + 1])), dim=-1)
        start += len(seq)
        gaps.append((got - reference).abs().flatten())
    gap = torch.cat(gaps)
    assert 0 < gap.max().item() <= TINY_BF16_LOGPROB_MAX, gap.max().item()
    assert gap.mean().item() <= TINY_BF16_LOGPROB_MEAN, gap.mean().item()


def test_bf16_one_row_decode_steps_stay_within_the_bound_and_leave_onednn_as_they_found_it(bf16_models) -> None:
    """A one-token step (batch-1 decode) takes torch's matrix-vector kernel with oneDNN off for the step only:
    its logprobs stay within the bf16 bound of the fp32 HF forward, token after token, and oneDNN is back on
    afterwards (also when the step raises)."""
    ours, hf = bf16_models
    seq = torch.randint(5, 261, (30,), generator=torch.Generator().manual_seed(4)).tolist()
    cache = KVCache(ours.kv_shape, rows=1, capacity=64)
    ours.forward(build_step([], prefills=[(0, 0, seq)], sample_tokens=[29], device="cpu", dtype=ours.dtype), cache)
    assert torch._C._get_mkldnn_enabled()
    for token in (7, 8, 9):
        logits = ours.forward(build_step([(0, len(seq), token)], prefills=[], sample_tokens=[0], device="cpu",
                                         dtype=ours.dtype), cache)
        seq.append(token)
        assert torch._C._get_mkldnn_enabled()
        reference = torch.log_softmax(reference_logits(hf, seq)[-1], dim=-1)
        gap = (torch.log_softmax(logits[0], dim=-1) - reference).abs()
        assert gap.max().item() <= TINY_BF16_LOGPROB_MAX and gap.mean().item() <= TINY_BF16_LOGPROB_MEAN
    seen: list[bool] = []

    def failing(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append(torch._C._get_mkldnn_enabled())
        raise RuntimeError("boom")

    original = ours._one_token_layers  # the layers of a one-token step (EngineOptions.one_token_path)
    ours._one_token_layers = failing  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="boom"):
            ours.forward(build_step([(0, len(seq), 5)], prefills=[], sample_tokens=[0], device="cpu",
                                    dtype=ours.dtype), cache)
    finally:
        ours._one_token_layers = original  # type: ignore[method-assign]
    assert seen == [False] and torch._C._get_mkldnn_enabled()


def test_bf16_one_row_steps_take_an_fp16_head_copy_that_weight_updates_refresh(bf16_models) -> None:
    """One-token steps of a bf16 engine multiply an fp16 copy of the head: logits within fp16 rounding of the
    fp32 head's (and not identical to them, so the copy is really used); a weight update rebuilds the copy;
    a hidden state or a head fp16 cannot hold falls back to the fp32 head exactly."""
    ours, hf = bf16_models
    seq = torch.randint(5, 261, (20,), generator=torch.Generator().manual_seed(6)).tolist()

    def one_row(half: bool) -> torch.Tensor:
        cache = KVCache(ours.kv_shape, rows=1, capacity=64)
        ours.forward(build_step([], prefills=[(0, 0, seq)], sample_tokens=[19], device="cpu", dtype=ours.dtype),
                     cache)
        base = ours.options
        ours.options = base.updated(half_head=half)
        try:
            return ours.forward(build_step([(0, len(seq), 7)], prefills=[], sample_tokens=[0], device="cpu",
                                           dtype=ours.dtype), cache)
        finally:
            ours.options = base

    try:
        half, full = one_row(True), one_row(False)
        assert ours._half_head is not None and ours._half_head.dtype == torch.float16
        scale = full.abs().max().item()
        assert 0 < (half - full).abs().max().item() <= scale * 2**-9 + 1e-3
        state = {k: v.clone() for k, v in hf.state_dict().items()}
        # the head's names (a tied head is the embedding: both names then carry the same new values)
        names = ["lm_head.weight"] if not ours.config.tie_word_embeddings else \
            [n for n in ("lm_head.weight", "model.embed_tokens.weight") if n in state]
        head = state[names[0]] * 1.5
        state.update(dict.fromkeys(names, head))
        ours.load_state_dict(state)
        assert ours._half_head is None  # rebuilt at the next one-token step, from the new weights
        half, full = one_row(True), one_row(False)
        torch.testing.assert_close(ours.lm_head, head, atol=0, rtol=0)
        assert 0 < (half - full).abs().max().item() <= full.abs().max().item() * 2**-9 + 1e-3
        # a final norm that puts the hidden state beyond fp16's range: the fp16 logits overflow, the fp32
        # head answers (exactly what the fp32 head gives)
        state["model.norm.weight"] = state["model.norm.weight"] * 1e6
        ours.load_state_dict(state)
        overflow = one_row(True)
        assert ours._half_head is not None and ours._half_head.numel() > 0
        assert torch.isfinite(overflow).all()
        torch.testing.assert_close(overflow, one_row(False), atol=0, rtol=0)
        state["model.norm.weight"] = hf.state_dict()["model.norm.weight"].clone()
        head[3, 0] = 1e5  # beyond fp16's range: the copy is refused, the fp32 head answers
        ours.load_state_dict(state)
        torch.testing.assert_close(one_row(True), one_row(False), atol=0, rtol=0)
        assert ours._half_head is not None and ours._half_head.numel() == 0
    finally:
        ours.load_state_dict(hf.state_dict())


def test_weight_updates_refresh_the_bf16_fused_matrices(bf16_models) -> None:
    ours, hf = bf16_models
    tokens = list(range(5, 40))

    def last_logprobs() -> torch.Tensor:
        cache = KVCache(ours.kv_shape, rows=1, capacity=64)
        step = build_step([], prefills=[(0, 0, tokens)], sample_tokens=[len(tokens) - 1], device="cpu",
                          dtype=ours.dtype)
        return torch.log_softmax(ours.forward(step, cache)[0], dim=-1)

    before_update = last_logprobs()
    state = hf.state_dict()
    update = {name: state[name] * 2 for name in ("model.layers.1.mlp.up_proj.weight",
                                                  "model.layers.0.self_attn.v_proj.weight")}
    ours.load_state_dict(update, strict=False)
    inter = ours.config.intermediate_size
    assert torch.equal(ours.layers[1].gate_up[inter:], update["model.layers.1.mlp.up_proj.weight"].bfloat16())
    changed = copy.deepcopy(hf)
    changed.load_state_dict({**state, **update})
    after_update = last_logprobs()
    reference = torch.log_softmax(reference_logits(changed, tokens)[-1], dim=-1)
    assert (after_update - reference).abs().max().item() <= TINY_BF16_LOGPROB_MAX
    assert (after_update - before_update).abs().max().item() > 10 * TINY_BF16_LOGPROB_MAX
    ours.load_state_dict(state)  # restore for the other tests

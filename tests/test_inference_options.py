"""EngineOptions: the engine's switches in one frozen record, whose defaults are the engine's behaviour."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from codedojo.inference import EngineOptions, LocalEngine, TinyModel
from codedojo.records import RecordError


def test_the_defaults_are_the_engines_behaviour() -> None:
    """Written out by hand: the engine's keyword defaults and the kernel choices it made before the switches
    were gathered here (module flags and constructor defaults)."""
    assert dataclasses.asdict(EngineOptions()) == {
        "kv_budget_tokens": None, "max_running": 64, "max_step_tokens": 1024, "seed": None, "prefix_cache": True,
        "packed_weights": True, "small_step_tokens": 1, "small_step_max_threads": 1, "run_call_cost": 256,
        "causal_first_chunks": True, "one_token_path": True, "native_attention": True, "native_rows": True,
        "native_rows_max_tokens": 32, "reduced_gemv_tokens": 1, "half_head": True, "wide_steps_fp32": None,
    }


def test_options_are_frozen() -> None:
    options = EngineOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_running = 8  # type: ignore[misc]
    changed = options.updated(max_running=8)
    assert changed.max_running == 8 and options.max_running == 64


def test_an_unknown_option_is_refused_naming_the_closest() -> None:
    with pytest.raises(TypeError, match="prefix_cahce"):
        EngineOptions(prefix_cahce=False)  # type: ignore[call-arg]
    with pytest.raises(RecordError, match=r"unknown key 'prefix_cahce'.*did you mean 'prefix_cache'"):
        EngineOptions().updated(prefix_cahce=False)


def test_a_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(RecordError, match="max_running must be an integer"):
        EngineOptions(max_running="8")  # type: ignore[arg-type]
    with pytest.raises(RecordError, match="one_token_path must be true or false"):
        EngineOptions().updated(one_token_path=1)


def test_a_negative_few_row_limit_is_refused_naming_the_off_value() -> None:
    with pytest.raises(ValueError, match=r"native_rows_max_tokens must be 0 \(off\) or more, got -1"):
        EngineOptions(native_rows_max_tokens=-1)
    assert EngineOptions(native_rows_max_tokens=0).native_rows_max_tokens == 0


def test_the_engine_takes_options_or_keywords_and_its_model_runs_with_them() -> None:
    loaded = TinyModel(max_positions=256).load()

    async def main() -> None:
        engine = LocalEngine(loaded.engine_model(), loaded.tokenizer)
        assert engine.options == EngineOptions() and engine.model.options == engine.options
        await engine.close()
        model = loaded.engine_model(options=EngineOptions(one_token_path=False))
        engine = LocalEngine(model, loaded.tokenizer, max_running=8, max_step_tokens=64, prefix_cache=False, seed=3)
        assert engine.options == EngineOptions(one_token_path=False, max_running=8, max_step_tokens=64,
                                               prefix_cache=False, seed=3)
        assert model.options is engine.options  # the model's kernel choices kept, the keywords on top
        assert (engine.scheduler.max_running, engine.scheduler.max_step_tokens) == (8, 64)
        assert not engine.scheduler.prefix_cache
        await engine.close()
        options = EngineOptions(native_attention=False, kv_budget_tokens=4096)
        engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, options=options)
        assert engine.model.options is options and not engine.model.native_attention
        assert engine.kv_budget_tokens == 4096
        await engine.close()

    asyncio.run(main())


def test_a_misspelt_keyword_fails_before_anything_is_built() -> None:
    with pytest.raises(RecordError, match="did you mean 'max_running'"):
        LocalEngine.from_spec("no-such-model", max_runing=8)


@pytest.mark.parametrize("field", ["max_running", "max_step_tokens", "kv_budget_tokens"])
def test_sizes_below_one_are_refused_where_they_are_set(field: str) -> None:
    """max_running 0 used to start an engine that held every request forever."""
    with pytest.raises(ValueError, match=f"EngineOptions.{field} must be at least 1, got 0"):
        EngineOptions(**{field: 0})

"""Bad input at every entry point: an error naming the input (file, row, key, argument, request field) and what
to do, never a traceback from deep inside, never a half-written output. docs/reliability.md lists each entry
point with the test that guards it; the rows other files already guard are named there, not repeated here."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch
from aiohttp import web

from codedojo.cli import main
from codedojo.config import AgentTaskDataset, SmolLM2_Recipe, TrainConfig
from codedojo.inference import LocalEngine, TinyModel
from codedojo.inference.server import MAX_BODY_BYTES, InferenceServer
from codedojo.precision import check_device
from codedojo.tasks.task import Task, TaskError, examples_dir
from codedojo.train.launch import load_tasks
from codedojo.trial.verifier import VerifierError, parse_reward_json, parse_reward_txt

EXAMPLE = examples_dir() / "hello-file"

# ----- task directories: task.toml, instruction.md, tests/ ------------------------------------------------


def _not_utf8(name: str) -> Callable[[Path], None]:
    return lambda task: (task / name).write_bytes(b"\xff\xfe not UTF-8\n")


def _test_sh_a_folder(task: Path) -> None:
    (task / "tests" / "test.sh").unlink()
    (task / "tests" / "test.sh").mkdir()


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_not_utf8("instruction.md"), "instruction.md is not UTF-8 text (byte 0); save it as UTF-8"),
        (lambda task: (task / "instruction.md").unlink(), "instruction.md is missing"),
        (_not_utf8("task.toml"), "task.toml is not UTF-8 text"),
        (lambda task: (task / "task.toml").unlink(), "task.toml is missing"),
        (lambda task: shutil.rmtree(task / "tests"), "tests/test.sh is missing"),
        (_test_sh_a_folder, "tests/test.sh is not a regular file"),
    ],
    ids=["instruction-not-utf8", "no-instruction", "task-toml-not-utf8", "no-task-toml", "no-tests-folder",
         "test-sh-a-folder"],
)
def test_a_broken_task_directory_is_named_with_its_problem(tmp_path: Path, breakage: Callable[[Path], None],
                                                           message: str) -> None:
    task = tmp_path / "task"
    shutil.copytree(EXAMPLE, task)
    breakage(task)
    with pytest.raises(TaskError) as raised:
        Task.load(task)
    assert f"{task}: {message}" in str(raised.value)


# ----- the verifier's reward file ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "data"),
    [(parse_reward_txt, b"1" * 1_000_000), (parse_reward_txt, b"x" * 1_000_000),
     (parse_reward_json, b'{"reward": "' + b"y" * 1_000_000 + b'"}')],
    ids=["txt-huge-number", "txt-huge-text", "json-huge-value"],
)
def test_a_huge_reward_file_is_refused_in_one_short_line(parse: Callable[[bytes], Any], data: bytes) -> None:
    with pytest.raises(VerifierError) as raised:
        parse(data)
    assert len(str(raised.value)) < 200 and "characters)" in str(raised.value)


# ----- dataset rows --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"prompt": "x"\n', "rows.jsonl:1: not JSON (Expecting ',' delimiter)"),
        (b"[1, 2]\n", "rows.jsonl:1: a row must be a JSON object"),
        (b'\n{"prompt": "x", "label": "a"}\n', "rows.jsonl: row 1 has no metadata.task_path (the task directory"),
        (b'{"prompt": "x", "metadata": {"task_path": 5}}\n', "row 1: metadata.task_path is 5, not a string"),
        (b'{"prompt": "x", "metadata": {"task_path": "a"}}\n\xff\xfe\n', "rows.jsonl:2: not UTF-8 text"),
        (b'{"prompt": "x", "metadata": {"task_path": "gone"}}\n', "1 training task(s) are invalid:\n"),
        (b"", "AgentTaskDataset('{path}') has no tasks"),
    ],
    ids=["not-json", "not-an-object", "no-task-path", "task-path-not-a-string", "not-utf8", "no-such-task", "empty"],
)
def test_bad_dataset_rows_are_named_by_file_and_row(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError) as raised:
        load_tasks(AgentTaskDataset(path))
    assert message.format(path=path) in str(raised.value)


def test_a_missing_dataset_file_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing.jsonl: no such dataset file \(write one with `codedojo"):
        load_tasks(AgentTaskDataset(tmp_path / "missing.jsonl"))


# ----- TrainConfig ---------------------------------------------------------------------------------------


def _dataset(tmp_path: Path) -> AgentTaskDataset:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"prompt": "x", "label": "hello-file", "metadata": {"task_path": str(EXAMPLE)}}))
    return AgentTaskDataset(path)


def test_train_config_refuses_a_model_that_is_no_model(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"model must be a model spec .* got int"):
        TrainConfig(model=3, dataset=_dataset(tmp_path), recipe=SmolLM2_Recipe())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [({"model": "no-such-model"}, "unknown model 'no-such-model': use one of"),
     ({"device": "tpu"}, "device 'tpu' is not a torch device: use cpu, cuda or cuda:N")],
    ids=["unknown-model", "unknown-device"],
)
def test_a_run_with_a_bad_model_or_device_stops_before_writing_anything(tmp_path: Path, change: dict[str, Any],
                                                                        message: str) -> None:
    run_dir = tmp_path / "run"
    settings = {"model": TinyModel(), "dataset": _dataset(tmp_path), "recipe": SmolLM2_Recipe(num_rollout=1),
                "run_dir": run_dir}
    config = TrainConfig(**{**settings, **change})
    with pytest.raises(ValueError, match=re.escape(message)):
        config.launch()
    assert not run_dir.exists()


def test_a_device_torch_cannot_use_is_named() -> None:
    assert check_device("cpu") == "cpu" and check_device(None) in ("cpu", "cuda")
    with pytest.raises(ValueError, match="'tpu' is not a torch device"):
        check_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'cuda': torch sees no CUDA device on this machine; use cpu"):
            check_device("cuda")


# ----- command-line arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "--tasks", "x", "--n", "0"], "argument --n: must be at least 1, got 0"),
        (["eval", "--tasks", "x", "--max-sandboxes", "-2"], "argument --max-sandboxes: must be at least 1, got -2"),
        (["serve", "--port", "70000"], "argument --port: must be 0 (any free port) to 65535, got 70000"),
        (["serve", "--max-running", "0"], "argument --max-running: must be at least 1, got 0"),
        (["dataset", "probe", "--input", "x", "--n", "two"], "argument --n: 'two' is not an integer"),
        (["tasks", "check", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
        (["sft", "--trajectories", "x", "--out", "y", "--epochs", "0"], "argument --epochs: must be at least 1"),
    ],
    ids=["eval-n", "eval-sandboxes", "serve-port", "serve-max-running", "probe-n", "check-workers", "sft-epochs"],
)
def test_an_argument_out_of_range_is_refused_by_name(argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--set", "num_rollout"], "codedojo train: --set 'num_rollout': expected FIELD=VALUE"),
        (["train", "--set", "lrr=1"], "codedojo train: --set: unknown key 'lrr' in the top level; did you mean 'lr'?"),
        (["train", "--set", "lr=fast"], "codedojo train: --set: lr must be a number, got 'fast'"),
        (["train", "--model", "no-such-model"], "codedojo train: unknown model 'no-such-model'"),
        (["eval", "--tasks", str(EXAMPLE), "--model", "no-such-model"], "codedojo eval: unknown model 'no-such-model'"),
        (["eval", "--tasks", str(EXAMPLE), "--model", "tiny-llama", "--temperature", "-1"],
         "codedojo eval: invalid sampling parameters: temperature must be a finite number >= 0, got -1.0"),
        (["eval", "--tasks", str(EXAMPLE), "--model", "tiny-llama", "--device", "tpu"],
         "codedojo eval: device 'tpu' is not a torch device"),
        (["serve", "--model", "tiny-llama", "--device", "tpu"], "codedojo serve: device 'tpu' is not a torch device"),
        (["serve", "--model", "tiny-llama", "--max-step-tokens", "8"],
         "codedojo serve: max_step_tokens (8) must be >= 2 * max_running (64)"),
        (["sft", "--trajectories", "x", "--out", "out", "--model", "no-such-model"],
         "codedojo sft: unknown model 'no-such-model'"),
        (["trial", str(EXAMPLE.parent / "no-such-task")], "no-such-task: not a directory"),
    ],
    ids=["set-no-value", "set-unknown-field", "set-wrong-type", "train-model", "eval-model", "eval-temperature",
         "eval-device", "serve-device", "serve-step-tokens", "sft-model", "trial-no-task"],
)
def test_a_bad_setting_stops_the_command_with_one_line_and_writes_nothing(
        argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # where a run directory (runs/...) or an output would go
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_port_that_is_taken_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", "tiny-llama", "--port", str(port)]) == 2
    assert f"codedojo serve: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


# ----- HTTP request bodies (`codedojo serve`) ------------------------------------------------------------


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A tiny model's server on a loop of its own thread, so each test posts with asyncio.run."""
    engine = LocalEngine.from_spec(TinyModel(), seed=0)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(InferenceServer(engine, model_name="tiny-llama").app())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(60)
        asyncio.run_coroutine_threadsafe(engine.close(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    async def post() -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession() as http, http.post(
                url, data=body, headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json()

    return asyncio.run(post())


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("route", "body", "status", "param", "message"),
    [
        ("/v1/chat/completions", b"{not json", 400, None, "request body is not JSON"),
        ("/v1/chat/completions", b"[1, 2]", 400, None, "request body must be a JSON object"),
        ("/v1/chat/completions", {"model": "tiny-llama"}, 400, "messages", "messages must be a non-empty list"),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, "messages",
         "messages[0] must be an object with a role"),
        ("/v1/chat/completions", {"messages": HI, "temperature": "hot"}, 400, "temperature",
         "temperature must be a number, got 'hot'"),
        ("/v1/chat/completions", {"messages": HI, "max_tokens": "ten"}, 400, "max_tokens",
         "max_tokens must be an integer of at least 1, got 'ten'"),
        ("/v1/chat/completions", {"messages": HI, "stream": "false"}, 400, "stream",
         "stream must be true or false, got 'false'"),
        ("/v1/chat/completions", {"messages": HI, "chat_template_kwargs": "x"}, 400, "chat_template_kwargs",
         "chat_template_kwargs must be an object"),
        ("/v1/chat/completions", {"messages": HI, "max_token": 3}, 400, None, "unknown chat completion keys: "
         "['max_token']"),
        ("/v1/chat/completions", {"messages": HI, "model": "gpt-7"}, 404, "model",
         "The model 'gpt-7' does not exist on this server; it serves 'tiny-llama'"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 2100}]}, 400, "messages",
         "maximum context length is 2048 tokens"),
        ("/generate", {"sampling_params": {}}, 400, None, "give exactly one of text or input_ids"),
        ("/generate", {"text": "hi", "sampling_params": []}, 400, None, "sampling_params must be an object"),
        ("/generate", {"text": "hi", "sampling_params": {"temperature": "x"}}, 400, "sampling_params",
         "sampling_params.temperature must be a number, got 'x'"),
        ("/generate", {"input_ids": [5] * 2048}, 400, "messages", "maximum context length is 2048 tokens"),
    ],
    ids=["invalid-json", "not-an-object", "missing-messages", "message-without-role", "temperature-type",
         "max-tokens-type", "stream-type", "template-kwargs-type", "unknown-key", "unknown-model", "chat-over-context",
         "generate-no-prompt", "sampling-params-type", "sampling-temperature-type", "generate-over-context"],
)
def test_a_bad_request_body_is_an_openai_shaped_error_naming_the_field(
        server_url: str, route: str, body: Any, status: int, param: str | None, message: str) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, answer = _post(server_url + route, data)
    assert got == status and set(answer["error"]) == {"message", "type", "param", "code"}
    assert message in answer["error"]["message"] and answer["error"]["param"] == param


def test_a_body_over_the_limit_is_a_413_naming_the_limit(server_url: str) -> None:
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * MAX_BODY_BYTES + b'"}]}'
    status, answer = _post(server_url + "/v1/chat/completions", body)
    assert status == 413 and answer["error"]["code"] == "request_too_large"
    assert f"over this server's limit of {MAX_BODY_BYTES >> 20} MiB" in answer["error"]["message"]


# ----- the table ----------------------------------------------------------------------------------------


def test_every_row_of_the_bad_input_table_names_a_test_that_exists() -> None:
    from doc_tables import assert_rows_name_existing_tests, section

    rows = [line for line in section("Bad input").splitlines()
            if line.startswith("| ") and not line.startswith("| entry point")]
    assert len(rows) >= 30
    assert_rows_name_existing_tests(rows)

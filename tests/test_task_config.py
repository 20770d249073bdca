"""task.toml: every Harbor 0.25 section, legacy aliases, unknown keys, byte-stable writing."""

from __future__ import annotations

import dataclasses

import pytest

from codedojo.records import RecordError
from codedojo.tasks.config import dump_task_config, parse_task_config
from codedojo.tasks.task import discover_tasks, examples_dir

FULL = """
schema_version = "1.4"
source = "unit"
multi_step_reward_strategy = "final"
artifacts = ["/app/out.txt", { source = "/logs/x", destination = "x", exclude = ["*.tmp"] }]

[task]
name = "org/full"
version = "2.0"
description = "every field"
keywords = ["a", "b"]
authors = [{ name = "Ada", email = "ada@example.org" }]

[metadata]
difficulty = "hard"
nested = { k = [1, 2.5, "three"] }

[verifier]
timeout_sec = 42
env = { TOKEN = "${HOST_TOKEN:-none}" }
user = "tester"
environment_mode = "separate"
network_mode = "allowlist"
allowed_hosts = ["pypi.org"]

[verifier.environment]
docker_image = "python:3.11"

[[verifier.collect]]
command = "cat /app/log"
timeout_sec = 5

[agent]
timeout_sec = 300
user = 1000
network_mode = "no-network"

[environment]
build_timeout_sec = 100
docker_image = "ghcr.io/x/y:1"
os = "linux"
cpus = 1.5
memory_mb = 2048
storage_mb = 4096
gpus = 1
gpu_types = ["H100"]
env = { A = "1" }
skills_dir = "skills"
workdir = "/work"
network_mode = "public"
allowed_hosts = []
tpu = { type = "v5e", topology = "2x2" }
healthcheck = { command = "true", retries = 5 }
mcp_servers = [{ name = "fs", transport = "stdio", command = "mcp-fs", args = ["--root", "/"] }]

[solution]
env = { S = "2" }

[[steps]]
name = "one"
min_reward = 0.5

[[steps]]
name = "two"
min_reward = { reward = 1.0 }
agent = { timeout_sec = 10 }
"""


def test_every_section_parses_with_its_values() -> None:
    config = parse_task_config(FULL, where="full/task.toml")
    assert config.task is not None and config.task.authors[0].email == "ada@example.org"
    assert config.verifier.timeout_sec == 42.0 and config.verifier.collect[0].timeout_sec == 5.0
    assert config.verifier.environment is not None and config.verifier.environment.docker_image == "python:3.11"
    assert config.agent.user == 1000 and config.agent.network_mode == "no-network"
    env = config.environment
    assert (env.cpus, env.memory_mb, env.storage_mb, env.gpus, env.workdir) == (1.5, 2048, 4096, 1, "/work")
    assert env.tpu is not None and env.tpu.topology == "2x2"
    assert env.healthcheck is not None and (env.healthcheck.retries, env.healthcheck.interval_sec) == (5, 5.0)
    assert env.mcp_servers[0].args == ("--root", "/")
    assert config.steps[1].min_reward == {"reward": 1.0} and config.steps[0].min_reward == 0.5
    assert config.artifacts[0] == "/app/out.txt" and config.artifacts[1].exclude == ("*.tmp",)


def test_writing_is_byte_stable_and_lossless() -> None:
    config = parse_task_config(FULL, where="full/task.toml")
    text = dump_task_config(config)
    again = parse_task_config(text, where="written")
    assert again == config
    assert dump_task_config(again) == text


def test_defaults_are_harbors() -> None:
    config = parse_task_config("", where="empty")
    assert config.schema_version == "1.4"
    assert config.verifier.timeout_sec == 600.0
    assert config.agent.timeout_sec is None
    assert config.environment.build_timeout_sec == 600.0
    assert config.environment.network_mode == "public"
    assert dump_task_config(config) == 'schema_version = "1.4"\n'


def test_legacy_aliases_are_read_and_written_in_the_new_form() -> None:
    legacy = 'version = "1.0"\n[environment]\nmemory = "4G"\nstorage = "10G"\nallow_internet = false\n'
    config = parse_task_config(legacy, where="legacy")
    assert config.schema_version == "1.0"
    assert (config.environment.memory_mb, config.environment.storage_mb) == (4096, 10240)
    assert config.environment.network_mode == "no-network"
    text = dump_task_config(config)
    assert "memory_mb = 4096" in text and "storage_mb = 10240" in text and 'network_mode = "no-network"' in text
    for old in ("memory =", "storage =", "allow_internet", "\nversion"):
        assert old not in text
    assert parse_task_config('[environment]\nmemory = "512M"', where="x").environment.memory_mb == 512
    assert parse_task_config("[environment]\nallow_internet = true", where="x").environment.network_mode == "public"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[verifer]\ntimeout_sec = 1", "unknown key 'verifer' in the top level; did you mean 'verifier'?"),
        ("[verifier]\ntimout_sec = 1", "unknown key 'timout_sec' in [verifier]; did you mean 'timeout_sec'?"),
        ("[environment]\nmemroy_mb = 1", "unknown key 'memroy_mb' in [environment]"),
        ("[environment.healthcheck]\ncommand = 'x'\nretry = 2", "unknown key 'retry' in [environment.healthcheck]"),
        ("[[steps]]\nname = 'a'\nbogus = 1", "unknown key 'bogus' in [steps[0]]"),
        ("[environment]\ncpus = 'two'", "environment.cpus must be int or float"),
        ("[environment]\nnetwork_mode = 'open'", "environment.network_mode is 'open'; expected one of"),
        ('[environment]\nmemory = "lots"', "is not a size like"),
        ("[verifier]\ntimeout_sec = nan", "verifier.timeout_sec must be finite"),
        ("[[steps]]\nmin_reward = 1", "missing required key 'name' in [steps[0]]"),
        ("x = ", "not valid TOML"),
    ],
)
def test_errors_name_the_file_and_the_key(text: str, expected: str) -> None:
    with pytest.raises(RecordError) as err:
        parse_task_config(text, where="tasks/t1/task.toml")
    assert str(err.value).startswith("tasks/t1/task.toml: ")
    assert expected in str(err.value)


def test_bundled_examples_round_trip_byte_for_byte() -> None:
    tasks = discover_tasks([examples_dir()])
    assert len(tasks) >= 4
    for path in tasks:
        text = (path / "task.toml").read_text()
        assert dump_task_config(parse_task_config(text, where=str(path))) == text, path.name


def test_a_none_in_free_form_metadata_is_left_out_when_written() -> None:
    config = parse_task_config('[metadata]\nrepository = "calc"\n', where="x")
    config = dataclasses.replace(config, metadata={"repository": "calc", "base_commit": None,
                                                   "nested": {"kept": 1, "gone": None}})
    text = dump_task_config(config)
    assert "base_commit" not in text and "gone" not in text
    assert parse_task_config(text, where="written").metadata == {"repository": "calc", "nested": {"kept": 1}}

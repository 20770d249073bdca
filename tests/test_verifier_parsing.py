"""Reward files: Harbor's rules for reward.json and reward.txt, and [verifier].env expansion."""

from __future__ import annotations

import pytest

from codedojo.trial.verifier import VerifierError, parse_reward_json, parse_reward_txt, resolve_env


def test_reward_json_is_a_flat_map_of_finite_numbers() -> None:
    assert parse_reward_json(b'{"reward": 1, "fail_to_pass": 0.5}') == {"reward": 1.0, "fail_to_pass": 0.5}
    assert parse_reward_json(b'{"score": 0.25}') == {"score": 0.25, "reward": 0.25}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"{not json", "not valid JSON"),
        (b"[1]", "JSON object"),
        (b"{}", "JSON object"),
        (b'{"reward": "1"}', "not a finite number"),
        (b'{"reward": true}', "not a finite number"),
        (b'{"reward": NaN}', "not a finite number"),
        (b'{"reward": {"x": 1}}', "not a finite number"),
        (b'{"a": 1, "b": 0}', "no 'reward' key"),
    ],
)
def test_bad_reward_json_is_a_verifier_error(data: bytes, message: str) -> None:
    with pytest.raises(VerifierError, match=message):
        parse_reward_json(data)


def test_reward_txt_is_one_number() -> None:
    assert parse_reward_txt(b"1\n") == {"reward": 1.0}
    assert parse_reward_txt(b" 0.75 ") == {"reward": 0.75}
    for bad, message in ((b"", "empty"), (b"yes", "not a number"), (b"inf", "not a finite number")):
        with pytest.raises(VerifierError, match=message):
            parse_reward_txt(bad)


def test_verifier_env_expands_host_variables() -> None:
    host = {"TOKEN": "abc"}
    env = {"A": "${TOKEN}", "B": "${MISSING:-fallback}", "C": "x-${MISSING}-y", "D": "plain"}
    assert resolve_env(env, host) == {"A": "abc", "B": "fallback", "C": "x--y", "D": "plain"}

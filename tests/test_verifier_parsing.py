"""Reward files: Harbor's rules for reward.json and reward.txt, and `${VAR}` templates in env tables."""

from __future__ import annotations

import pytest

from codedojo.tasks.env import MissingVariable, resolve_env
from codedojo.trial.verifier import VerifierError, parse_reward_json, parse_reward_txt


def test_reward_json_is_a_flat_map_of_finite_numbers_or_booleans() -> None:
    assert parse_reward_json(b'{"reward": 1, "fail_to_pass": 0.5}') == {"reward": 1.0, "fail_to_pass": 0.5}
    assert parse_reward_json(b'{"score": 0.25}') == {"score": 0.25, "reward": 0.25}
    assert parse_reward_json(b'{"reward": true, "fast": false}') == {"reward": 1.0, "fast": 0.0}


def test_a_multi_key_reward_without_reward_is_the_mean_of_its_values() -> None:
    # Harbor averages each key over trials; the mean of the keys averages to the mean of those averages.
    assert parse_reward_json(b'{"correctness": 1, "performance": 0.5}') == {
        "correctness": 1.0, "performance": 0.5, "reward": 0.75}
    assert parse_reward_json(b'{"a": true, "b": 0, "c": 0.5}')["reward"] == 0.5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"{not json", "not valid JSON"),
        (b"[1]", "JSON object"),
        (b"{}", "JSON object"),
        (b'{"reward": "1"}', "not a finite number"),
        (b'{"reward": NaN}', "not a finite number"),
        (b'{"reward": {"x": 1}}', "not a finite number"),
        (b'{"a": 1, "b": null}', "not a finite number"),
        (b'{"a": 1e999}', "not a finite number"),
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


def test_templates_are_whole_values_resolved_from_the_host_as_harbor_does() -> None:
    host = {"TOKEN": "abc", "EMPTY": ""}
    env = {"A": "${TOKEN}", "B": "${MISSING:-fallback}", "C": "x-${TOKEN}-y", "D": "plain", "E": "${EMPTY:-d}",
           "F": "${MISSING:-}"}
    # Embedded templates are literal text in Harbor; a set-but-empty variable wins over the default.
    assert resolve_env(env, section="[verifier].env", host_env=host) == {
        "A": "abc", "B": "fallback", "C": "x-${TOKEN}-y", "D": "plain", "E": "", "F": ""}


def test_a_missing_variable_is_an_error_naming_it_and_the_table() -> None:
    with pytest.raises(MissingVariable) as err:
        resolve_env({"KEY": "${API_TOKEN}"}, section="[solution].env", host_env={})
    assert "[solution].env KEY" in str(err.value) and "'API_TOKEN'" in str(err.value)

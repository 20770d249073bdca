"""Turning a model's reply into one bash command, or a format error the agent is told about.

Three action formats, chosen by the model's chat template:

* `fenced`       one bash command in a fenced code block (```bash ... ```), for any chat model;
* `hermes`       a tool call `<tool_call>{"name": "bash", "arguments": {"command": ...}}</tool_call>`
                 (the JSON style of Qwen2.5/Qwen3 templates);
* `qwen3_coder`  a tool call `<tool_call><function=bash><parameter=command>...</parameter></function></tool_call>`
                 (the XML style of Qwen3-Coder and Qwen3.6 templates).

Exactly one action per reply: none, or more than one, is a format error with a message that says how to
answer instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from codedojo.inference.tool_calls import TOOL_CALL, XML_FUNCTION, XML_PARAMETER

ActionFormat = Literal["fenced", "hermes", "qwen3_coder"]
ACTION_FORMATS: tuple[ActionFormat, ...] = ("fenced", "hermes", "qwen3_coder")

_FENCED = re.compile(r"```[ \t]*(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run one bash command in a fresh shell in the task's working directory.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command to run."}},
            "required": ["command"],
        },
    },
}


@dataclass(frozen=True)
class Action:
    command: str


@dataclass(frozen=True)
class FormatError:
    problem: str
    """What was wrong, phrased for the model."""


def parse_action(text: str, *, fmt: ActionFormat) -> Action | FormatError:
    if fmt == "fenced":
        return _parse_fenced(text)
    if fmt == "hermes":
        return _parse_hermes(text)
    return _parse_qwen3_coder(text)


def _parse_fenced(text: str) -> Action | FormatError:
    blocks = _FENCED.findall(text)
    if not blocks:
        return FormatError("your reply had no command: put exactly one bash command in a ```bash code block")
    if len(blocks) > 1:
        return FormatError(f"your reply had {len(blocks)} code blocks: use exactly one ```bash block per reply")
    command = blocks[0].strip()
    if not command:
        return FormatError("the ```bash block was empty: put one command in it")
    return Action(command)


def _single_call(text: str) -> str | FormatError:
    calls = TOOL_CALL.findall(text)
    if not calls:
        return FormatError("your reply had no tool call: call the bash tool exactly once")
    if len(calls) > 1:
        return FormatError(f"your reply made {len(calls)} tool calls: call the bash tool exactly once per reply")
    return str(calls[0])


def _parse_hermes(text: str) -> Action | FormatError:
    call = _single_call(text)
    if isinstance(call, FormatError):
        return call
    try:
        payload = json.loads(call)
    except json.JSONDecodeError as e:
        return FormatError(f"the tool call is not valid JSON ({e.msg}); send {{\"name\": \"bash\", "
                           "\"arguments\": {\"command\": \"...\"}}")
    if not isinstance(payload, dict) or payload.get("name") != "bash":
        return FormatError("only the bash tool exists: call it with {\"name\": \"bash\", \"arguments\": {...}}")
    arguments = payload.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    command = arguments.get("command") if isinstance(arguments, dict) else None
    if not isinstance(command, str) or not command.strip():
        return FormatError("the bash tool call needs a non-empty \"command\" argument")
    return Action(command.strip())


def _parse_qwen3_coder(text: str) -> Action | FormatError:
    call = _single_call(text)
    if isinstance(call, FormatError):
        return call
    functions = XML_FUNCTION.findall(call)
    if len(functions) != 1 or functions[0][0] != "bash":
        return FormatError("call the bash tool as <function=bash><parameter=command>...</parameter></function>")
    parameters = dict(XML_PARAMETER.findall(functions[0][1]))
    command = parameters.get("command", "").strip()
    if not command:
        return FormatError("the bash tool call needs a non-empty command parameter")
    return Action(command)


def format_for_template(chat_template: str | None) -> ActionFormat:
    """The action format a chat template implies: tool calls when it renders tools, else fenced."""
    template = chat_template or ""
    if "<function=" in template or "<parameter=" in template:
        return "qwen3_coder"
    if "<tool_call>" in template:
        return "hermes"
    return "fenced"

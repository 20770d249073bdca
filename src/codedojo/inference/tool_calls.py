"""OpenAI tools on the server side: putting tools and past tool calls into a chat template, and reading the
model's tool calls back out of its text.

Two call formats, the ones codedojo's agent reads (`codedojo.agent.actions`) and Qwen-family models write:

* `hermes`       `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5 / Qwen3 templates);
* `qwen3_coder`  `<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>`
                 (Qwen3-Coder / Qwen3.6 templates).

A template that renders `tools` itself gets them as they are (past calls' arguments as objects, which
those templates expect). A template that does not (ChatML, SmolLM2) gets a system message section that
describes the tools and the hermes format, past calls written out in that format and tool results as
user turns in `<tool_response>` tags, so any chat model can be asked for tool calls.

Parsing: the content is the text before the first `<tool_call>`; each call must be closed (`</tool_call>`,
and `</function>` in the XML format) and parse completely, or the whole text stays content with no calls:
a reply cut off at max_tokens mid-call is not guessed at.

`TOOL_CALL`, `XML_FUNCTION` and `XML_PARAMETER` are the one definition of the call syntax; the agent's
action parser (`codedojo.agent.actions`) reads calls with the same patterns.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from codedojo.inference.errors import InvalidRequestError

ToolFormat = Literal["hermes", "qwen3_coder"]
CALL_START = "<tool_call>"

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.DOTALL)
XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    """JSON text of the arguments object (what OpenAI's `function.arguments` holds)."""
    id: str

    def as_openai(self, *, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": "function",
                               "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            out["index"] = index
        return out


def tool_format(chat_template: str | None) -> ToolFormat:
    """The call format a chat template implies (hermes unless it writes Qwen3-Coder's XML)."""
    template = chat_template or ""
    return "qwen3_coder" if "<function=" in template or "<parameter=" in template else "hermes"


def template_renders_tools(chat_template: str | None) -> bool:
    return "tools" in (chat_template or "")


def check_tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list) or not tools:
        raise InvalidRequestError("tools must be a non-empty list of {\"type\": \"function\", ...}", param="tools")
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        # A non-dict tool has no function: the first test answers it (a 400 naming tools, not a crash).
        if not isinstance(function, dict) or tool.get("type") != "function" or not function.get("name"):
            raise InvalidRequestError(
                f"each tool must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {tool!r}",
                param="tools",
            )
    return tools


def _arguments_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def prepare_messages(
    messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]] | None, *, chat_template: str | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, tools) to hand to `apply_chat_template`, given flattened-content OpenAI messages."""
    native = template_renders_tools(chat_template)
    out: list[dict[str, Any]] = []
    for message in messages:
        message = dict(message)
        calls = message.get("tool_calls") or []
        if native:
            if calls:
                message["tool_calls"] = [
                    {**c, "function": {**c["function"], "arguments": _arguments_object(c["function"]["arguments"])}}
                    for c in calls
                ]
            out.append(message)
            continue
        if calls:
            written = [_hermes_text(c["function"]["name"], c["function"]["arguments"]) for c in calls]
            message["content"] = "\n".join(filter(None, [message.get("content") or "", *written]))
            message.pop("tool_calls")
        if message.get("role") == "tool":
            message = {"role": "user", "content": f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"}
        out.append(message)
    if native or not tools:
        return out, tools if native else None
    section = _tools_prompt(tools)
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{section}"}
    else:
        out.insert(0, {"role": "system", "content": section})
    return out, None


def _hermes_text(name: str, arguments: Any) -> str:
    payload = {"name": name, "arguments": _arguments_object(arguments)}
    return f"{CALL_START}\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>"


def _tools_prompt(tools: list[dict[str, Any]]) -> str:
    signatures = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more of these functions (JSON signatures):\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "To call one, write a JSON object with its name and arguments between tool_call tags:\n"
        '<tool_call>\n{"name": "FUNCTION", "arguments": {"ARGUMENT": "VALUE"}}\n</tool_call>'
    )


def parse_tool_calls(
    text: str, *, fmt: ToolFormat, tools: list[dict[str, Any]] | None = None
) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a reply. No calls: (text, []). Content is None when only calls were written."""
    start = text.find(CALL_START)
    if start < 0:
        return text, []
    bodies = TOOL_CALL.findall(text, start)
    if len(bodies) != text.count(CALL_START, start):
        return text, []  # a call left open (the reply was cut off): not a call
    calls = []
    for body in bodies:
        call = _parse_hermes(body) if fmt == "hermes" else _parse_xml(body, tools or [])
        if call is None:
            return text, []
        calls.append(call)
    content = text[:start].rstrip()  # (a stream has sent this part as it came, leading spaces and all)
    return content or None, calls


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _parse_hermes(body: str) -> ToolCall | None:
    try:
        payload = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return None
    arguments = _arguments_object(payload.get("arguments", {}))
    if not isinstance(arguments, dict):
        return None
    return ToolCall(payload["name"], json.dumps(arguments, ensure_ascii=False), _call_id())


def _parse_xml(body: str, tools: list[dict[str, Any]]) -> ToolCall | None:
    functions = XML_FUNCTION.findall(body)
    if len(functions) != 1:
        return None
    name, inner = functions[0]
    schema = next((t["function"].get("parameters") or {} for t in tools if t["function"]["name"] == name), {})
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for key, value in XML_PARAMETER.findall(inner):
        kind = (properties.get(key) or {}).get("type", "string")
        # Values are written as raw text; a non-string parameter holds JSON (a number, a list, ...).
        arguments[key] = value if kind == "string" else _arguments_object(value)
    return ToolCall(name, json.dumps(arguments, ensure_ascii=False), _call_id())

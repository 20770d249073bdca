"""What the agent is told: system and task prompts, how command output comes back, format errors.

Templates are Jinja with strict undefined variables. Two profiles ship:

* `standard` — for capable models: one task message with the working rules, in the spirit of
  mini-swe-agent (one command per reply, each in a fresh shell, a sentinel command to submit);
* `small` — for small models: short rules plus worked example exchanges in the conversation, because a
  135M-parameter model copies the shape of what it has seen far better than it follows instructions.

A model spec picks its profile by size; `AgentConfig.prompt_profile` overrides it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2

SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@dataclass(frozen=True, kw_only=True)
class PromptProfile:
    name: str
    system_template: str
    instance_template: str
    observation_template: str
    format_error_template: str
    examples: tuple[tuple[str, str], ...] = ()
    """Worked exchanges shown before the task: (user message, assistant reply) pairs."""


def render(template: str, variables: Mapping[str, Any]) -> str:
    return _ENV.from_string(template).render(**variables).strip()


_STANDARD_SYSTEM = """\
You are a software engineer working alone in a Linux shell inside a sandbox. You make progress by running \
bash commands and reading their output, one command per reply."""

_STANDARD_INSTANCE = """\
<task>
{{ task }}
</task>

How to work:
- The repository is in {{ workdir }}, which is also the working directory of every command.
- Reply with a short thought and then exactly one command{% if action_format == "fenced" %} in a ```bash code \
block{% else %} as one call of the bash tool{% endif %}. Replies without exactly one command are rejected.
- Every command runs in a new shell: `cd` and variables do not carry over to the next command, but files do. \
Chain steps with && when they belong together.
- Commands that wait for input never finish; use non-interactive flags. A command is stopped after \
{{ command_timeout }} seconds.
- Do not edit the tests to make them pass; fix the code. Edit files with sed, tee, cat <<'EOF' or a short python3 \
script.
- A good order: read the relevant code, reproduce the problem, change the code, check the change (rerun what \
failed), look for edge cases.
- When you are done, submit by running this command on its own:
  echo {{ sentinel }}
  It ends the session; nothing you do after it counts. You have at most {{ max_steps }} commands."""

_STANDARD_OBSERVATION = """\
<returncode>{{ returncode }}</returncode>
{% if timed_out %}<warning>The command was stopped after {{ command_timeout }} seconds; this is its output \
up to then.</warning>
{% endif %}{% if elided_chars %}<warning>The output was long; {{ elided_chars }} characters in the middle are \
not shown. Use head, tail, grep or sed -n to read selectively.</warning>
<output_head>
{{ head }}
</output_head>
<output_tail>
{{ tail }}
</output_tail>{% else %}<output>
{{ output }}
</output>{% endif %}"""

_FORMAT_ERROR = """\
Format error: {{ problem }}.
Reply again with one short thought and exactly one command{% if action_format == "fenced" %} in a ```bash code \
block{% else %} as one bash tool call{% endif %}. To finish, the command is: echo {{ sentinel }}"""

_SMALL_SYSTEM = """\
You operate a Linux shell. Each reply is exactly one bash command in a ```bash block. \
Each command runs in a new shell in the project directory. When the task is done, reply with \
echo {{ sentinel }}"""

_SMALL_INSTANCE = """\
{{ task }}"""

_SMALL_OBSERVATION = """\
exit code {{ returncode }}{% if timed_out %} (stopped after {{ command_timeout }} s){% endif %}
{% if elided_chars %}{{ head }}
[... {{ elided_chars }} characters not shown ...]
{{ tail }}{% else %}{{ output }}{% endif %}"""

_SMALL_EXAMPLES = (
    (
        "Make the file notes.txt contain the single line: done",
        "```bash\necho done > notes.txt\n```",
    ),
    ("exit code 0\n", "```bash\ncat notes.txt\n```"),
    ("exit code 0\ndone\n", "```bash\necho " + SUBMIT_SENTINEL + "\n```"),
    (
        "In shapes.py the function area returns width + height. It should return width * height.",
        "```bash\ngrep -n 'def area' -A 2 shapes.py\n```",
    ),
    ("exit code 0\n7:def area(width, height):\n8:    return width + height\n",
     "```bash\nsed -i '8c\\    return width * height' shapes.py\n```"),
    ("exit code 0\n", "```bash\nsed -n '7,8p' shapes.py\n```"),
    ("exit code 0\ndef area(width, height):\n    return width * height\n",
     "```bash\necho " + SUBMIT_SENTINEL + "\n```"),
)

PROFILES: dict[str, PromptProfile] = {
    "standard": PromptProfile(
        name="standard", system_template=_STANDARD_SYSTEM, instance_template=_STANDARD_INSTANCE,
        observation_template=_STANDARD_OBSERVATION, format_error_template=_FORMAT_ERROR,
    ),
    "small": PromptProfile(
        name="small", system_template=_SMALL_SYSTEM, instance_template=_SMALL_INSTANCE,
        observation_template=_SMALL_OBSERVATION, format_error_template=_FORMAT_ERROR, examples=_SMALL_EXAMPLES,
    ),
}


def get_profile(name: str) -> PromptProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown prompt profile {name!r}; choose one of: {', '.join(sorted(PROFILES))}") from None

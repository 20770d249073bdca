"""Chat templates (Jinja, as transformers tokenizers carry them) for the tokenizers codedojo builds itself.

CHATML renders every message the same way, so a conversation's tokens only ever grow by appending.
QWEN3_STYLE behaves like the real Qwen3 template where it matters for RL: the reasoning of an assistant
turn (everything up to `</think>`) is dropped once a later user message exists, so re-rendering a
conversation rewrites its past turns. Agent loops must therefore append tokens, never re-render history;
the tiny Qwen3 model ships this template so tests can catch loops that re-render.
"""

from __future__ import annotations

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

QWEN3_STYLE = (
    "{%- set state = namespace(last_user=-1) %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set state.last_user = loop.index0 %}{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- set text = message['content'] %}"
    "{%- if message['role'] == 'assistant' and loop.index0 < state.last_user and '</think>' in text %}"
    "{%- set text = text.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + text + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

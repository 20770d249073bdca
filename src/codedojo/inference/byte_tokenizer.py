"""A byte-level tokenizer built at run time, for the tiny test models: nothing to download.

Every byte is one token (byte-level BPE with no merges), preceded by a few special tokens whose ids
match SmolLM2's (`<|endoftext|>` 0, `<|im_start|>` 1, `<|im_end|>` 2) and the `<think>` / `</think>`
markers Qwen3-style templates use. Any text round-trips exactly.
"""

from __future__ import annotations

from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")
VOCAB_SIZE = len(SPECIAL_TOKENS) + len(THINK_TOKENS) + 256


def byte_level_tokenizer(*, chat_template: str) -> Any:
    """A `PreTrainedTokenizerFast` with 256 byte tokens, the special tokens above and `chat_template`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fixed = SPECIAL_TOKENS + THINK_TOKENS
    vocab = {token: i for i, token in enumerate(fixed)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
    )

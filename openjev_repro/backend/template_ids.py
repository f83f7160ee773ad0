"""The chat template's fixed token ids, cached: only the user text is tokenised per request (`--prompt-ids cached`).

Every candidate is one user message through the chat template, a generation prompt and thinking off
(`prompts.chat_prompt`). The template's text around the user message never changes, so at load the
template is rendered once around a sentinel and split there: `prefix` and `suffix` token ids are kept,
and per request only the user text goes through the tokenizer (its Rust backend directly, no Jinja).

That is the same token sequence only when no token crosses the two seams. The suffix starts with a
special token (`<|im_end|>` in Qwen's template), where tokenizers always split. At the prefix's end a
merge across the seam is possible when the user text starts with whitespace (a newline run), so such
texts take the template path. At load the cache is checked against the template path on probe texts;
any difference, a sentinel the template does not keep verbatim, or a suffix that does not start with a
special token turns the cache off (reported in /health `prompt_ids`), and every request takes the
template path. The tests check ids identical over the fixture's 98 requests.

With `parallel` (`--prompt-ids cached-parallel`) long user texts are tokenised in pieces at once
(`parallel_tokens.py`, with its own load-time check); `parallel_status` says whether that is on.
"""

from __future__ import annotations

from typing import Any

from .parallel_tokens import ParallelEncoder, encode_ids
from .prompts import chat_prompt

__all__ = ["PROBES", "TemplateIds"]

_SENTINEL = "\u2063OPENJEV-USER-TEXT\u2063"
PROBES = ("Context:\nThe meeting is on Monday.\n\nQuestion: Is it Monday?\n", "x", "Ünïcödé — 日本語 text\n\n",
          "trailing newline\n", "a<|im_end|>b", "12345 678")


class TemplateIds:
    """ids(text) == chat_prompt(tokenizer, text), from cached prefix/suffix ids where that is safe."""

    def __init__(self, tokenizer: Any, parallel: bool = False):
        self.tokenizer = tokenizer
        self.prefix: list[int] = []
        self.suffix: list[int] = []
        self.encoder: ParallelEncoder | None = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if parallel and backend is not None:
            self.encoder = ParallelEncoder(backend)
        self.parallel_status = self.encoder.status if self.encoder else None
        self.status = self._prepare()
        self.enabled = self.status == "cached"

    def _prepare(self) -> str:
        split = self._split_template()
        if isinstance(split, str):
            return split
        head, tail = split
        self.prefix = self._encode(head)
        self.suffix = self._encode(tail)
        self.enabled = True
        wrong = [p for p in PROBES if self.ids(p) != chat_prompt(self.tokenizer, p)]
        self.enabled = False
        if wrong:
            return f"template (cached ids differ from the template's for a probe text: {wrong[0]!r})"
        return "cached"

    def _split_template(self) -> tuple[str, str] | str:
        """(text before, text after the user message), or why the cache cannot be used."""
        if getattr(self.tokenizer, "backend_tokenizer", None) is None:
            return "template (no fast tokenizer)"
        rendered = self.tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False,
                                                      add_generation_prompt=True, enable_thinking=False)
        if not isinstance(rendered, str) or rendered.count(_SENTINEL) != 1:
            return "template (the chat template does not keep the user text verbatim)"
        head, tail = rendered.split(_SENTINEL)
        special = set(getattr(self.tokenizer, "all_special_tokens", []) or [])
        special |= {str(t) for t in getattr(self.tokenizer, "added_tokens_decoder", {}).values()}
        if not any(tail.startswith(tok) for tok in special if tok):
            return "template (the template's suffix does not start with a special token)"
        return head, tail

    def _encode(self, text: str) -> list[int]:
        return encode_ids(self.tokenizer.backend_tokenizer, text)

    def ids(self, text: str) -> list[int]:
        if self.enabled and text and not text[0].isspace():
            user = self.encoder.encode(text) if self.encoder else self._encode(text)
            return self.prefix + user + self.suffix
        return chat_prompt(self.tokenizer, text)

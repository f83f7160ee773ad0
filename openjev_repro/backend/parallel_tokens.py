"""Long user texts tokenised in parallel pieces, with the same ids (`--prompt-ids cached-parallel`).

Tokenising is most of the serving time left for long requests on the H200 (about 2.5 µs a token:
results/h200-fast-27b-shape/profile-2026-12-02b/). A byte-level BPE tokenizer merges only inside a
pre-token, and its pre-tokenizer (GPT-2's or Qwen's regex) always ends a pre-token between an ASCII
letter or digit and a following space that precedes another ASCII letter or digit ("ab cd" becomes
"ab", " cd"). Cutting the text just before such a space therefore gives pieces whose ids, concatenated,
are the ids of the whole text. Texts of at least MIN_CHARS characters are cut into up to
min(MAX_PIECES, CPUs) pieces of about equal length at such places, and the tokenizer's `encode_batch`
(its Rust thread pool, GIL released) tokenises them at once.

It is used only where that argument holds, checked at load: a BPE model, no normalizer (or NFC), a
pre-tokenizer made of ByteLevel / Split / Digits parts, TOKENIZERS_PARALLELISM not switched off, and
the probe texts below tokenised identically whole and in pieces. A text that contains an added
token's content (a special token written out, which the tokenizer matches before pre-tokenising)
is never cut. Otherwise `status` says why it is off and every text is tokenised whole.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import msgspec

__all__ = ["MAX_PIECES", "MIN_CHARS", "ParallelEncoder", "cut_points", "encode_ids"]

MIN_CHARS = 4000
MAX_PIECES = 8
_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Sequence"}
_WORDS = ("alpha", "Beta", "gamma42", "Ünïcödé", "日本語", "x", "7", "don't", "e-mail", "a.b", "$5", "(ok)", "—")


def _batch(backend: Any) -> Any:
    """The tokenizer's batch encoder that skips character offsets (tokenizers >= 0.20: about a third faster
    than `encode` on the 74 published lengths, same ids), else the one that computes them."""
    return getattr(backend, "encode_batch_fast", None) or backend.encode_batch


def encode_ids(backend: Any, text: str) -> list[int]:
    """backend.encode(text, add_special_tokens=False).ids, without computing the offsets nobody reads."""
    return list(_batch(backend)([text], add_special_tokens=False)[0].ids)


def _probes() -> list[str]:
    """Long texts that mix words, digits, punctuation, non-ASCII text, newlines and space runs."""
    texts = []
    for seed in range(3):
        parts = []
        for i in range(2500):
            word = _WORDS[(i * (seed + 3) + i // 7) % len(_WORDS)]
            sep = " " if (i + seed) % 11 else ("\n\n" if (i + seed) % 3 else "  ")
            parts.append(word + sep)
        texts.append("".join(parts))
    return texts


def _alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def cut_points(text: str, pieces: int) -> list[int]:
    """Indices of spaces between two ASCII letters/digits, one near each len(text) * k / pieces (k >= 1);
    fewer where the text has no such space after a target."""
    cuts: list[int] = []
    for k in range(1, pieces):
        i = text.find(" ", max(len(text) * k // pieces, cuts[-1] + 1 if cuts else 1))
        while i != -1 and not (i + 1 < len(text) and _alnum(text[i - 1]) and _alnum(text[i + 1])):
            i = text.find(" ", i + 1)
        if i == -1:
            break
        cuts.append(i)
    return cuts


class _Part(msgspec.Struct, frozen=True):
    type: str | None = None


class _PreTokenizer(_Part, frozen=True):
    pretokenizers: list[_Part] = []


class _TokenizerJson(msgspec.Struct, frozen=True):
    """What the argument above needs of the tokenizer's own JSON (the `tokenizers` library's format)."""

    model: _Part = _Part()
    normalizer: _Part | None = None
    pre_tokenizer: _PreTokenizer | None = None

    def structure_problem(self) -> str | None:
        """Why cutting between pre-tokens might change the ids; None when the argument holds."""
        if self.model.type != "BPE":
            return "not a BPE tokenizer"
        if self.normalizer is not None and self.normalizer.type != "NFC":
            return f"normalizer {self.normalizer.type}"
        pre = self.pre_tokenizer or _PreTokenizer()
        kinds = {pre.type} | {p.type for p in pre.pretokenizers}
        if not kinds <= _PRE_TOKENIZERS:
            return f"pre-tokenizer {sorted(k for k in kinds if k)}"
        return None


class ParallelEncoder:
    """encode(text) == backend.encode(text, add_special_tokens=False).ids, in pieces where that is safe."""

    def __init__(self, backend: Any, pieces: int | None = None, min_chars: int = MIN_CHARS):
        self.backend = backend
        self.pieces = pieces or min(MAX_PIECES, os.cpu_count() or 1)
        self.min_chars = min_chars
        self.added = [t.content for t in backend.get_added_tokens_decoder().values() if t.content]
        self.status = self._check()
        self.enabled = self.status.startswith("parallel")

    def _check(self) -> str:
        if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("0", "false", "off", "no"):
            return "whole (TOKENIZERS_PARALLELISM is off)"
        if self.pieces < 2:
            return "whole (one CPU)"
        try:
            problem = msgspec.json.decode(self.backend.to_str(), type=_TokenizerJson).structure_problem()
        except msgspec.ValidationError as exc:
            problem = f"tokenizer.json {exc}"
        if problem:
            return f"whole (unrecognised tokenizer: {problem})"
        self.enabled = True
        wrong = [p for p in _probes() if self.encode(p) != self._whole(p)]
        self.enabled = False
        if wrong:
            return "whole (ids in pieces differ from the whole text's for a probe)"
        return f"parallel from {self.min_chars} characters, up to {self.pieces} pieces"

    def _whole(self, text: str) -> list[int]:
        return encode_ids(self.backend, text)

    def encode(self, text: str) -> list[int]:
        if not self.enabled or len(text) < self.min_chars or any(a in text for a in self.added):
            return self._whole(text)
        cuts = cut_points(text, self.pieces)
        if not cuts:
            return self._whole(text)
        bounds = [0, *cuts, len(text)]
        parts = [text[a:b] for a, b in itertools.pairwise(bounds)]
        ids: list[int] = []
        for encoding in _batch(self.backend)(parts, add_special_tokens=False):
            ids.extend(encoding.ids)
        return ids

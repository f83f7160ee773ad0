"""Input-token differences of paired cases: what two backends (or two runs) counted for the same request.

Two servers of the same model that render the same prompt count the same input tokens; a
difference means their prompts differ (a renderer dropping noul criteria shows as a constant
offset on every case). `token_differences` takes the paired cases' counts and returns a
`TokenDifferences` record (the per-case differences, candidate - baseline, with a summary;
`to_json()` is what compare writes, `TokenDifferences.decode` reads it back); `phrase` says it in words.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np

from ..errors import EvidenceError

__all__ = ["CaseTokens", "TokenDifferences", "token_differences", "token_phrase"]

_SHOWN_IDS = 10
_SHOWN_DELTAS = 4  # distinct offsets listed one by one; more are given as their range


class CaseTokens(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str | None
    seq: int
    baseline: int
    candidate: int
    delta: int


class TokenDifferences(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The paired cases' token counts: how many were paired, compared (both counted), missing a count, differ."""

    paired: int
    compared: int
    missing: int
    differing: int
    max_abs_delta: int | None
    deltas: dict[str, int]  # offset (as text, a JSON key) -> cases with it, offsets ascending
    by_case: list[CaseTokens]

    @classmethod
    def decode(cls, data: object) -> TokenDifferences:
        """The record of compare's `input_tokens` object; EvidenceError naming the field msgspec refused."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise EvidenceError(f"input_tokens is not a token comparison: {exc}") from None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = msgspec.to_builtins(self)
        return out

    def _offsets(self) -> str:
        counts = {int(d): n for d, n in self.deltas.items()}
        if len(counts) <= _SHOWN_DELTAS:
            return ", ".join(f"{d:+d} in {n}" for d, n in counts.items())
        return f"{len(counts)} different offsets from {min(counts):+d} to {max(counts):+d}"

    def _named(self) -> str:
        """': a, b, …' naming the differing cases, '' when every compared case differs."""
        if self.differing == self.compared:
            return ""
        ids = [str(c.id) for c in self.by_case if c.delta]
        more = f", … ({len(ids) - _SHOWN_IDS} more)" if len(ids) > _SHOWN_IDS else ""
        return f": {', '.join(ids[:_SHOWN_IDS])}{more}"

    def phrase(self, candidate: str, baseline: str) -> str:
        """'input tokens identical in all 24 cases' or 'input tokens DIFFER in 24 of 24 cases (B − A: +26 in 24)'."""
        missing = f"; {self.missing} without a count" if self.missing else ""
        if not self.compared:
            return f"input tokens not compared (no case has both counts{missing})"
        if not self.differing:
            return f"input tokens identical in all {self.compared} cases{missing}"
        return (f"input tokens DIFFER in {self.differing} of {self.compared} cases ({candidate} − {baseline}: "
                f"{self._offsets()}){self._named()}{missing}")


def token_differences(ids: list[str | None], seqs: list[int], baseline: np.ndarray, has_baseline: np.ndarray,
                      candidate: np.ndarray, has_candidate: np.ndarray) -> TokenDifferences:
    """Per paired case: both counts and their difference; cases where either count is missing are counted apart."""
    known = has_baseline & has_candidate
    delta = candidate.astype(np.int64) - baseline.astype(np.int64)
    index = np.flatnonzero(known).tolist()
    deltas = [int(delta[k]) for k in index]
    cases = [CaseTokens(id=ids[k], seq=seqs[k], baseline=int(baseline[k]), candidate=int(candidate[k]), delta=d)
             for k, d in zip(index, deltas, strict=True)]
    return TokenDifferences(paired=len(ids), compared=len(cases), missing=len(ids) - len(cases),
                            differing=sum(1 for d in deltas if d), max_abs_delta=max(map(abs, deltas), default=None),
                            deltas={str(d): n for d, n in sorted(Counter(d for d in deltas if d).items())},
                            by_case=cases)


def token_phrase(diff: TokenDifferences, candidate: str, baseline: str) -> str:
    """`diff.phrase(candidate, baseline)`."""
    return diff.phrase(candidate, baseline)

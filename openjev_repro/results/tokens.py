"""Input-token differences of paired cases: what two backends (or two runs) counted for the same request.

Two servers of the same model that render the same prompt count the same input tokens; a
difference means their prompts differ (a renderer dropping noul criteria shows as a constant
offset on every case). `token_differences` takes the paired cases' counts and returns the
per-case differences (candidate - baseline) with a summary; `token_phrase` says it in words.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

__all__ = ["token_differences", "token_phrase"]

_SHOWN_IDS = 10
_SHOWN_DELTAS = 4  # distinct offsets listed one by one; more are given as their range


def token_differences(ids: list[str | None], seqs: list[int], baseline: np.ndarray, has_baseline: np.ndarray,
                      candidate: np.ndarray, has_candidate: np.ndarray) -> dict[str, Any]:
    """Per paired case: both counts and their difference; cases where either count is missing are counted apart."""
    known = has_baseline & has_candidate
    delta = candidate.astype(np.int64) - baseline.astype(np.int64)
    index = np.flatnonzero(known).tolist()
    deltas = [int(delta[k]) for k in index]
    cases = [{"id": ids[k], "seq": seqs[k], "baseline": int(baseline[k]), "candidate": int(candidate[k]), "delta": d}
             for k, d in zip(index, deltas, strict=True)]
    return {"paired": len(ids), "compared": len(cases), "missing": len(ids) - len(cases),
            "differing": sum(1 for d in deltas if d),
            "max_abs_delta": max(map(abs, deltas), default=None),
            "deltas": {str(d): n for d, n in sorted(Counter(d for d in deltas if d).items())},
            "by_case": cases}


def _offsets(diff: dict[str, Any]) -> str:
    counts = {int(d): n for d, n in diff["deltas"].items()}
    if len(counts) <= _SHOWN_DELTAS:
        return ", ".join(f"{d:+d} in {n}" for d, n in counts.items())
    return f"{len(counts)} different offsets from {min(counts):+d} to {max(counts):+d}"


def _named(diff: dict[str, Any]) -> str:
    """': a, b, …' naming the differing cases, '' when every compared case differs."""
    if diff["differing"] == diff["compared"]:
        return ""
    ids = [str(c["id"]) for c in diff["by_case"] if c["delta"]]
    more = f", … ({len(ids) - _SHOWN_IDS} more)" if len(ids) > _SHOWN_IDS else ""
    return f": {', '.join(ids[:_SHOWN_IDS])}{more}"


def token_phrase(diff: dict[str, Any], candidate: str, baseline: str) -> str:
    """'input tokens identical in all 24 cases' or 'input tokens DIFFER in 24 of 24 cases (B − A: +26 in 24)'."""
    compared, differing = diff["compared"], diff["differing"]
    missing = f"; {diff['missing']} without a count" if diff["missing"] else ""
    if not compared:
        return f"input tokens not compared (no case has both counts{missing})"
    if not differing:
        return f"input tokens identical in all {compared} cases{missing}"
    return (f"input tokens DIFFER in {differing} of {compared} cases ({candidate} − {baseline}: {_offsets(diff)})"
            f"{_named(diff)}{missing}")

"""A reproduction verdict as people read it (plain lines, at most 80 columns, the same on a terminal and
through a pipe; verdict.md is the same text) and as machines read it (verdict.dsse.json: an in-toto
Statement v1 with an SLSA Verification Summary predicate, manifest/attestations.py)."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

from ..manifest.attestations import signed_envelope, verification_summary
from ..results.equivalence import CONFIDENCE, RESAMPLES, LatencyJudgement, ProbabilityJudgement
from .reproduce import BackendResult, FieldValues, ReproductionVerdict, RunUnderTest

__all__ = ["verdict_lines", "wrapped", "write_outputs"]

WIDTH = 80


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent]


def wrapped(text: str) -> str:
    """One message folded at 80 columns (continuation lines indented)."""
    return "\n".join(_wrap(text, ""))


def _run_line(role: str, run: RunUnderTest) -> list[str]:
    digest = f"manifest sha256 {run.manifest_sha256[:16]}" if run.manifest_sha256 else "no manifest (imported)"
    return _wrap(f"{role}: {run.given} (study {run.recipe.study.id}, {digest})", "")


def _field_lines(title: str, fields: list[FieldValues]) -> list[str]:
    lines = [title]
    for f in fields:
        lines += _wrap(f.text())
    return lines


def _interval(j: LatencyJudgement) -> str:
    return "no interval" if j.interval is None else f"[{j.interval[0]:.3f}, {j.interval[1]:.3f}]"


def _bounds(j: LatencyJudgement) -> list[str]:
    if j.minimum is None:
        return []
    parts = []
    for role, b in zip(("original", "rerun"), j.bounds, strict=True):
        parts.append(f"{role} [{b[0]:.2f}, {b[1]:.2f}] ms" if b else f"{role} none")
    return _wrap(f"order-statistic {int(CONFIDENCE * 100)}% bounds of {j.metric.upper()}: {'; '.join(parts)} "
                 f"(needs >= {j.minimum} requests per run)", "      ")


def _latency_lines(j: LatencyJudgement) -> list[str]:
    head = (f"    {j.metric:<5} {j.original:10.3f} -> {j.rerun:10.3f} ms  x{j.point:.3f} {_interval(j)}")
    return [head, *_wrap(f"{j.outcome.value}: {j.reading}", "      "), *_bounds(j)]


def _answer_lines(a: ProbabilityJudgement) -> list[str]:
    flips = ", ".join(a.flipped[:6]) + (f" and {len(a.flipped) - 6} more" if len(a.flipped) > 6 else "")
    delta = "max |dp|: no paired case has a probability in both runs, not judged" if a.delta_outcome is None else \
        f"max |dp| {a.max_delta:.6f} (margin {a.max_delta_margin:g}): {a.delta_outcome.value}"
    return [*_wrap(delta, "    "),
            *_wrap(f"decision flips {len(a.flipped)} (margin {a.flips_margin}): {a.flips_outcome.value}"
                   + (f": {flips}" if flips else ""), "    ")]


def _backend_lines(r: BackendResult) -> list[str]:
    lines = [f"  {r.workload}/{r.backend}"]
    for j in r.latency:
        lines += _latency_lines(j)
    return lines + (_answer_lines(r.answers) if r.answers else [])


def verdict_lines(v: ReproductionVerdict) -> list[str]:
    """The verdict, its first line `Verdict: <VERDICT>`."""
    lines = [f"Verdict: {v.kind.value}", *_run_line("original", v.original), *_run_line("rerun", v.rerun)]
    lines += _wrap(f"margins: {v.source.value}; policy sha256 {v.policy_sha256[:16]}", "")
    lines += _wrap(f"basis: {v.policy.basis}", "  ")
    c = v.comparable
    if c.differing:
        lines += _field_lines("Not comparable (must match, original vs rerun):", c.differing)
    else:
        compared = [f for f in c.must if f.recorded]
        lines += _wrap(f"Comparable: {len(compared)} must-match values equal "
                       f"({', '.join(sorted({f.field for f in compared}))}).", "")
    if c.explanations:
        lines += _field_lines("Possible explanations (should match, differ):", c.explanations)
    if c.not_recorded:
        lines += _wrap("Not recorded by either run: " + ", ".join(c.not_recorded), "")
    if v.results:
        lines.append(f"Equivalence (rerun / original; {int(CONFIDENCE * 100)}% interval, {RESAMPLES} "
                     f"resamples, seed {v.seed}):")
        for r in v.results:
            lines += _backend_lines(r)
    elif not c.differing:
        lines.append("No backend measured by both runs: nothing to judge.")
    return lines


def _signed_file(run: RunUnderTest) -> tuple[str, bytes]:
    """The file that vouches for a run: its manifest.dsse.json, or an imported run's import.json."""
    for name in ("manifest.dsse.json", "import.json"):
        path = run.directory / name
        if path.is_file():
            return f"{run.given}/{name}", path.read_bytes()
    raise FileNotFoundError(f"{run.given} has neither manifest.dsse.json nor import.json")


def write_outputs(v: ReproductionVerdict, out: Path, key_path: Path | None) -> tuple[Path, Path]:
    """verdict.md and verdict.dsse.json in a new folder `out`, written whole or not at all (never over an
    existing folder)."""
    from ..evidence.files import atomic_directory

    text = "\n".join(verdict_lines(v))
    subjects = [(name, hashlib.sha256(data).hexdigest()) for name, data in map(_signed_file, (v.original, v.rerun))]
    statement = verification_summary(subjects, verdict=v.kind.value, policy_sha256=v.policy_sha256,
                                     policy_uri=f"openjev-repro:reproduction-margins ({v.source.value})",
                                     input_attestations=subjects)
    envelope = signed_envelope(statement, key_path)
    with atomic_directory(out) as folder:
        (folder / "verdict.md").write_text(f"# Reproduction verdict\n\n```\n{text}\n```\n", encoding="utf-8")
        (folder / "verdict.dsse.json").write_bytes(envelope)
    return out / "verdict.md", out / "verdict.dsse.json"

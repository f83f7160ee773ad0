"""An imported study's published figures and cleanup, checked by the importer, as report lines.

`audit/importer.py` classifies each published figure against the one recomputed from the
imported rows; these functions turn that record (import.json) into the lines `import-evidence`
prints and `report.md` shows. Each figure and the cleanup are decoded once into `PublishedFigure`
and `PublishedCleanup` (their rules are methods); pure functions of the record: no file access.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from ..errors import EvidenceError
from ..evidence.decoding import Number, Quoted

__all__ = ["PublishedCleanup", "PublishedFigure", "cleanup_line", "figure_counts", "figure_lines"]

_MARKS = {"exact": "EXACT ", "within_rounding": "WITHIN", "mismatch": "DIFF  ", "not_compared": "N/A   "}


class PublishedFigure(msgspec.Struct, frozen=True, kw_only=True):
    """One published figure next to ours, as import.json records it (audit/figures.py writes it)."""

    arm: str | None
    index: int | None = msgspec.field(name="pass")
    figure: str
    published: Quoted
    ours: Quoted
    status: str | UnsetType = UNSET  # records written before labels existed carry only `matches`
    matches: bool | UnsetType = UNSET
    difference: Number | None = None
    half_unit: Number | None = None
    rule: str | None = None
    note: str | UnsetType = UNSET
    ours_by_rule: dict[str, Number | None] | UnsetType = UNSET

    @property
    def label(self) -> str:
        if isinstance(self.status, str) and self.status:
            return self.status
        return "exact" if self.matches is True else "mismatch"

    def where(self) -> str:
        return f"{self.arm} pass {self.index}" if self.index is not None else f"{self.arm or '-'} all"

    def name(self) -> str:
        """'ARM pass N FIGURE' or 'ARM FIGURE', as the summary line lists those within rounding."""
        return f"{self.arm} pass {self.index} {self.figure}" if self.index is not None else f"{self.arm} {self.figure}"

    def _extra(self) -> str:
        if self.label == "within_rounding":
            return f"  |diff| {self.difference or 0:.1e} <= {self.half_unit or 0:.1e}"
        if self.label == "not_compared":
            return f"  ({self.note if isinstance(self.note, str) else 'not compared'})"
        return ""

    def line(self) -> str:
        rule = f" ({self.rule})" if self.rule else ""
        return (f"{_MARKS.get(self.label, 'DIFF  ')} {self.where():<26} {self.figure:<27} published {_g(self.published)}"
                f"  ours {_g(self.ours)}{rule}{self._extra()}")


class _Counts(msgspec.Struct, frozen=True, kw_only=True):
    compared: int
    exact: int
    within_rounding: int
    mismatch: int
    not_compared: int = 0
    largest_within_rounding_difference: Number | None = None


def _figures(figures: object) -> list[PublishedFigure]:
    try:
        return msgspec.convert(figures, list[PublishedFigure])
    except msgspec.ValidationError as exc:
        raise EvidenceError(f"import.json figures are not published figures: {exc}") from None


def _counts(figures: list[PublishedFigure]) -> _Counts:
    compared = [f for f in figures if f.label != "not_compared"]
    within = [f for f in compared if f.label == "within_rounding"]
    return _Counts(compared=len(compared), exact=sum(f.label == "exact" for f in compared),
                   within_rounding=len(within), mismatch=sum(f.label == "mismatch" for f in compared),
                   not_compared=len(figures) - len(compared),
                   largest_within_rounding_difference=max((f.difference for f in within if f.difference is not None),
                                                          default=None))


def figure_counts(figures: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """How many figures reproduce, exactly or within rounding, and the largest difference within rounding."""
    out: dict[str, object] = msgspec.to_builtins(_counts(_figures(figures)))
    return out


def _g(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _summary_line(figures: list[PublishedFigure], recorded: object) -> str:
    counts = _counts(figures) if recorded is None else msgspec.convert(recorded, _Counts)
    within = [f.name() for f in figures if f.status == "within_rounding"]
    summary = (f"{counts.exact + counts.within_rounding} of {counts.compared} published figures reproduce: "
               f"{counts.exact} exact, {counts.within_rounding} within rounding")
    if within:
        summary += f" ({', '.join(within)}; largest difference {counts.largest_within_rounding_difference or 0:.1e})"
    summary += f", {counts.mismatch} mismatch."
    if counts.not_compared:
        summary += f" {counts.not_compared} not compared."
    return summary


def figure_lines(report: Mapping[str, object]) -> list[str]:
    """One line per published figure of an import.json object, then how many reproduce."""
    figures = _figures(report.get("figures"))
    return [*(f.line() for f in figures), _summary_line(figures, report.get("figure_counts"))]


class _Processes(msgspec.Struct, frozen=True):
    """A published cleanup record that lists its task processes (system1-omni's cleanup.json)."""

    processes: list[Quoted]
    all_task_processes_exited: Quoted = None

    def line(self) -> str:
        codes = ", ".join(str(p.get("returncode")) for p in self.processes if isinstance(p, dict))
        return (f"published cleanup: all task processes exited: {self.all_task_processes_exited}; "
                f"{len(self.processes)} processes (return codes {codes or 'none'})")


class PublishedCleanup(msgspec.Struct, frozen=True, kw_only=True):
    """import.json's `cleanup`: the published summary's cleanup, per-arm records, cleanup.json, and whether they agree."""

    summary: Quoted = None
    per_arm: dict[str, Quoted] | None = None
    cleanup_json: Quoted = None
    consistent: bool | UnsetType = UNSET

    def processes(self) -> _Processes | None:
        for record in (self.summary, self.cleanup_json):
            if isinstance(record, dict) and "processes" in record:
                try:
                    return msgspec.convert(record, _Processes)
                except msgspec.ValidationError:
                    return None
            if record:
                return None
        return None

    def line(self) -> str | None:
        processes = self.processes()
        if processes is not None:
            line = processes.line()
        elif self.per_arm:
            line = "published cleanup: " + "; ".join(f"{a}: {json.dumps(c, sort_keys=True)}"
                                                     for a, c in self.per_arm.items())
        else:
            return None
        if isinstance(self.consistent, bool):
            line += "; cleanup.json " + ("equals" if self.consistent else "DIFFERS FROM") + " summary.json's cleanup"
        return line + "."


def cleanup_line(cleanup: object) -> str | None:
    """The cleanup's line; None when nothing about cleanup was published (or it has another shape)."""
    try:
        return msgspec.convert(cleanup or {}, PublishedCleanup).line()
    except msgspec.ValidationError:
        return None

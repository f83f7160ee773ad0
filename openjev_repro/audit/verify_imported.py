"""What an imported run must show: another project's evidence, converted by `import-evidence`.

An imported run is never signed (we did not measure it); what binds it is its source. In order:
the import record (import.json decoded into its record, state "imported"); the converted files
against the digests recorded at import, no file the import did not write; with `--source DIR`
(the user's folder of the published files, never the path import.json names), the import made
again from it: its files must be this run's, byte for byte, so an edited import.json (a gate
outcome, the hardware, a date) or a changed source fails, and a source whose figures no longer
reproduce says NOT REPRODUCED; case ids; response bodies; every statistic recomputed; every
published figure recomputed from the rows with the figure rules the import used
(`audit/figures.py`).
"""

from __future__ import annotations

import json
import operator
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import numpy as np

from ..errors import EvidenceError, ReproError, UnsupportedFormat
from ..evidence.decoding import UNSET, Count, Finite, UnsetType
from ..evidence.records import ImportRecord, import_of
from ..evidence.rundir import RunDir, check_response_entry
from ..hashing import hash_files
from .figures import Figure, NotReproduced, Samples, figures_of, layout_figures, published_figures, summary_from_figures
from .run_checks import (
    BAD_EVIDENCE,
    Check,
    Evidence,
    KeyedEntry,
    case_ids_check,
    first_difference,
    responses_check,
    run_step,
    safe_name,
)

__all__ = ["verify_imported"]


def verify_imported(run: RunDir, *, pubkey: Path | None = None, evidence: Evidence | None = None,
                    source: Path | None = None) -> list[Check]:
    """Every check of an imported run. No signature is required; one asked for with `pubkey` fails,
    because an imported run has none."""
    ev = evidence if evidence is not None else Evidence(run)
    try:
        record = import_of(run)
        status = run.state_record().status
    except UnsupportedFormat:
        raise
    except BAD_EVIDENCE as exc:
        return [Check("import record", False, f"{type(exc).__name__}: {exc}")]
    assert record is not None  # verify_dir sends only runs with an import.json here
    return ImportedRun(ev, record, source).checks(pubkey, status)


class ImportedRun:
    """An imported run, its import record, and the source folder the user named (if any)."""

    def __init__(self, ev: Evidence, record: ImportRecord, source: Path | None) -> None:
        self.ev, self.run, self.record, self.source = ev, ev.run, record, source

    def checks(self, pubkey: Path | None, status: str) -> list[Check]:
        r = self.record
        signature = (Check("signature", False, f"a signature by {pubkey} was asked for, but this is an imported "
                           "run, which is never signed (we did not measure it); verify it without --pubkey")
                     if pubkey is not None else
                     Check("signature", None, "imported run: never signed, because we did not measure it; "
                           "no signature is required, and none is checked"))
        checks = [signature, Check("import record", status == "imported",
                                   f"state.json status {status!r}; imported from {r.source} ({r.format} format, "
                                   f"import.json format_version {r.format_version})")]
        # Hash the converted files in background threads (hashlib releases the GIL) while the rows are parsed.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-hash") as pool:
            hashing = pool.submit(self._hash_converted)
            self.ev.preload()
            steps: list[tuple[str, Callable[[], list[Check]]]] = [
                ("converted files", lambda: self.converted_files(hashing.result())), ("source files", self.source_files),
                ("case ids", lambda: case_ids_check(self.ev)), ("responses", lambda: responses_check(self.ev)),
                ("imported statistics", self.statistics)]
            for name, step in steps:
                checks += run_step(name, step)
        return checks

    def _hash_converted(self) -> dict[str, str]:
        """sha256 of every converted file import.json records that is a regular file of the run."""
        paths = {name: self.run.path / name for name in self.record.converted
                 if safe_name(name) and (self.run.path / name).is_file()}
        digests = hash_files(paths.values())
        return {name: digests[path] for name, path in paths.items()}

    def converted_files(self, digests: dict[str, str]) -> list[Check]:
        """Every converted file has the sha256 import.json records (`digests`: what the files hash to now)."""
        from .imports.run import REPORT_FILES

        recorded = self.record.converted
        if self.record.format_version == 1:
            return [Check("converted files", None, "import.json format 1 records no digests of the converted files; "
                          "import again to record them")]
        bad = []
        for name, want in sorted(recorded.items()):
            if name not in digests:
                bad.append(f"{name} is recorded but absent")
            elif digests[name] != want:
                bad.append(f"{name} has a different sha256 than recorded at import")
        present = {p.relative_to(self.run.path).as_posix() for p in self.run.evidence_files()}
        unlisted = sorted(present - set(recorded) - {"state.json", "import.json"} - REPORT_FILES)
        bad += [f"{name} was not written by the import" for name in unlisted]
        return [Check("converted files", not bad, "; ".join(bad[:6]) if bad
                      else f"{len(recorded)} converted files match the sha256 recorded at import")]

    def source_files(self) -> list[Check]:
        """With --source, the import made again from it gives this run's files byte for byte."""
        r = self.record
        if self.source is None:  # a path inside import.json is never followed: the run is unsigned, so it is its word
            return [Check("source files", None, f"not re-hashed: pass --source DIR to check the published files "
                          f"(imported from {r.source}) again; at import {len(r.verified)} were checked "
                          "against their digests")]
        root = Path(self.source)
        if not root.is_dir():
            return [Check("source files", False, f"--source {root} is not a directory")]
        with tempfile.TemporaryDirectory(prefix="openjev-reimport-") as tmp:
            again = Path(tmp) / "run"
            try:
                _reimport(root, again, self.ev, r)
            except NotReproduced as exc:
                return [Check("source files", False, f"NOT REPRODUCED: {exc}")]
            except ReproError as exc:
                return [Check("source files", False, f"the import from {root} is refused now: {exc}")]
            differ = _different_files(self.run.path, again)
        if differ:
            return [Check("source files", False, f"the import made again from {root} differs from this run: "
                          f"{', '.join(differ[:6])} (edited after import, or the source changed)")]
        digests = r.digests_file or "no published digests"
        return [Check("source files", True, f"the import made again from {root} ({len(r.verified)} files checked "
                      f"against {digests}) gives this run's files byte for byte, import.json included")]

    def statistics(self) -> list[Check]:
        from ..results.statistics import summarize

        ours = json.loads(json.dumps(summarize(self.ev.table, self.ev.recipe).to_json(), allow_nan=False))
        diff = first_difference(ours, self.run.as_written("summary.json"))
        checks = [Check("statistics recomputed", diff is None, f"recomputed from rows differs from summary.json at {diff}"
                        if diff else "every statistic recomputed from rows.jsonl equals summary.json exactly")]
        if self.record.format_version == 1:
            return checks + [Check("published figures", None, "import.json format 1: re-import to record figure status")]
        return checks + [self.figures_check()]

    def figures_check(self) -> Check:
        figures = figures_of(list(self.record.figures))
        recomputed = self.recomputed_figures(figures)
        diff = first_difference([f.to_json() for f in recomputed], [f.to_json() for f in figures])
        if diff:
            return Check("published figures", False, f"recomputed figures differ from import.json at {diff}")
        mismatched = [f for f in figures if f.status == "mismatch"]
        if mismatched:
            return Check("published figures", False, f"NOT REPRODUCED: {len(mismatched)} of {len(figures)} published "
                         f"figures do not reproduce from the rows: " + "; ".join(f.line() for f in mismatched[:6]))
        exact = sum(f.status == "exact" for f in figures)
        within = sum(f.status == "within_rounding" for f in figures)
        return Check("published figures", True, f"REPRODUCED: {len(figures)} published figures recomputed from the "
                     f"rows: {exact} exact, {within} within rounding, 0 mismatch")

    def recomputed_figures(self, figures: list[Figure]) -> list[Figure]:
        """The figures recomputed from the rows with the rules of the run's format, as import.json writes them."""
        if self.record.format == "system1-omni":
            recomputed = self.system1_figures(figures)
        else:
            published = self.record.published_summary
            if not isinstance(published, dict):
                raise EvidenceError("import.json: published_summary is not an object")
            recomputed = layout_figures(self.record.format, published, self.samples())
        return figures_of([f.to_json() for f in recomputed], "recomputed")

    def system1_figures(self, figures: list[Figure]) -> list[Figure]:
        """The figures of a system1-omni import recomputed from its rows (in file order within each
        (arm, pass), as the import appended them) and the probability deltas its responses keep."""
        t = self.ev.table
        latencies = {(backend, index): t.latency_ms[idx].tolist() for (backend, index), idx in
                     t.groups(np.flatnonzero(t.phase.equals("measured")), ("backend", "pass_index")).items()}
        return published_figures(summary_from_figures(figures), latencies, _max_deltas(list(_imported_entries(self.ev))))

    def samples(self) -> Samples:
        """The published seconds and decisions the import kept in responses/, per (arm, workload, pass)."""
        samples: Samples = {}
        for entry in _imported_entries(self.ev):
            if isinstance(entry.seconds, UnsetType) or isinstance(entry.decisions, UnsetType):
                raise EvidenceError(f"{entry.backend} responses: an entry lacks seconds or decisions")
            samples.setdefault((entry.backend, entry.workload, entry.pass_index), []).append(
                (float(entry.seconds), entry.decisions))
        return samples


class _ImportedEntry(msgspec.Struct, frozen=True):
    """The fields of an imported run's responses/*.jsonl line that the figure rules read."""

    backend: str
    workload: str
    pass_index: Count
    seconds: Finite | UnsetType = UNSET  # formats without client nanoseconds: their published seconds
    decisions: Count | UnsetType = UNSET
    probability_delta: Finite | UnsetType = UNSET  # system1-omni
    v: int | UnsetType = UNSET


_ENTRY = msgspec.json.Decoder(_ImportedEntry)


def _imported_entries(ev: Evidence) -> Iterator[_ImportedEntry | KeyedEntry]:
    """Each responses/*.jsonl line of an imported run, in a format this tool reads (as the response check
    decoded them, when it kept them)."""
    if ev.response_entries is not None:
        for kept in ev.response_entries.values():
            yield from kept
        return
    for path in sorted(ev.run.path.glob("responses/*.jsonl")):
        data = path.read_bytes()
        try:
            entries: list[_ImportedEntry] = _ENTRY.decode_lines(data)
        except msgspec.DecodeError:  # decoded again line by line, for the message naming the line
            entries = [_entry(line, f"{path.name}:{number}") for number, line in enumerate(data.splitlines(), start=1)]
        for number, entry in enumerate(entries, start=1):
            if not isinstance(entry.v, UnsetType):
                check_response_entry({"v": entry.v}, f"{path.name}:{number}")
            yield entry


def _max_deltas(entries: list[_ImportedEntry | KeyedEntry]) -> dict[tuple[str, int], float]:
    """(arm, pass) -> the largest |probability_delta| its entries keep (C loops: map, dict, numpy)."""
    values = list(map(operator.attrgetter("probability_delta"), entries))
    keys = list(map(operator.attrgetter("backend", "pass_index"), entries))
    if UNSET in values:
        present = [i for i, v in enumerate(values) if v is not UNSET]
        values, keys = [values[i] for i in present], [keys[i] for i in present]
    index = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    largest = np.zeros(len(index))
    np.maximum.at(largest, np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=len(keys)),
                  np.abs(np.array(values, dtype=np.float64)))
    return {key: float(largest[i]) for key, i in index.items()}


def _entry(line: bytes, where: str) -> _ImportedEntry:
    try:
        return _ENTRY.decode(line)
    except msgspec.DecodeError as exc:
        raise EvidenceError(f"{where}: not an imported response entry ({exc})") from None


def _reimport(root: Path, out: Path, ev: Evidence, record: ImportRecord) -> None:
    """The import of `root` made again into `out`, written as the run's import wrote it: the same source
    path in its text, the same workload name and, where the source publishes no date, the same date."""
    from .importer import import_evidence
    from .imports.run import Origin

    recipe = ev.recipe
    import_evidence(root, out, fmt=record.format, subdir=record.evidence_folder or None,
                    workload=recipe.workloads[0].name, origin=Origin(source=record.source, date=str(recipe.study.date)))


def _different_files(run: Path, again: Path) -> list[str]:
    """Relative names of files that differ between the run and the import made again (state.json aside)."""
    from .imports.run import REPORT_FILES

    def files(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}

    ours, theirs = files(run), files(again)
    names = sorted((set(ours) | set(theirs)) - REPORT_FILES - {"state.json"})
    return [n for n in names if n not in ours or n not in theirs or ours[n].read_bytes() != theirs[n].read_bytes()]

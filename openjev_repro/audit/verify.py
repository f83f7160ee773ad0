"""`verify`: check a signed run (or an aggregate-only bundle) from its bytes alone.

Checks, in order: the envelope's form; the signature; every subject digest; no evidence
file outside the subjects; the run is complete; the copied run files equal the signed
ones; case ids; response bodies against row hashes; and every statistic and gate
recomputed from rows.jsonl + recipe.yaml (`results.statistics.summarize`) equals the signed value
and summary.json exactly. A check is PASS, FAIL, or N/A (an aggregate-only bundle
cannot make it, and says why).
"""

from __future__ import annotations

import base64
import hashlib
import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import yaml

from ..errors import EvidenceError, ReproError, UnsupportedFormat
from ..evidence.files import read_json
from ..evidence.recipe import Recipe, parse_recipe
from ..evidence.rows import Row
from ..evidence.rundir import (
    ENVELOPE_NAME,
    READABLE_VERSIONS,
    RESPONSE_VERSIONS,
    RunDir,
    check_response_entry,
    scan_tree,
)
from ..evidence.summary import Summary
from ..hashing import hash_file, hash_files
from ..manifest.dsse import verify_envelope
from ..manifest.keys import load_public_key
from ..manifest.statement import OPTIONAL_FILES, read_statement, recipe_json
from ..results.energy import GPU_FILE, read_gpu_events
from ..results.row_table import CHUNK_BYTES, RowTable, as_table, chunks, read_table
from ..results.trace_gates import trace_inputs
from .bundle import opened
from .figures import Samples, layout_figures, published_figures, summary_from_figures
from .identity_check import runtime_identity_verdict
from .trace_audit import kernel_families_recomputed as _trace_outcomes

__all__ = [
    "Check",
    "Evidence",
    "check_case_ids",
    "first_difference",
    "format_checks",
    "verify_dir",
    "verify_imported",
    "verify_path",
]


# What damaged files raise while being read (JSON, UTF-8 and base64 errors are ValueErrors). A KeyError,
# TypeError or AttributeError is a bug of this tool, never damaged evidence: it is not caught, so it
# shows as one (every field a check reads is checked for its kind first, raising EvidenceError).
_BAD_EVIDENCE = (ReproError, ValueError, yaml.YAMLError, OSError)
# What a content check may meet besides: evidence nested or sized to exhaust the reader.
_DAMAGE = (*_BAD_EVIDENCE, RecursionError, MemoryError)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None  # None: this bundle cannot make the check
    detail: str
    unsigned: bool = False  # the signature check of an UNSIGNED manifest accepted with --allow-unsigned

    @property
    def mark(self) -> str:
        if self.unsigned:
            return "UNSIGNED"
        return {True: "PASS", False: "FAIL", None: "N/A "}[self.passed]


def _printable(text: str) -> str:
    """One line: newlines and other unprintable characters (from file names, say) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def format_checks(checks: list[Check]) -> str:
    """One line per check. An UNSIGNED manifest is never "PASS signature", and nothing it lists is
    called signed: its digests and copies are only what the manifest records. Details are escaped,
    so no name can forge a verdict line."""
    unsigned = any(c.unsigned for c in checks)
    shown = [_unsigned_wording(c) for c in checks] if unsigned else checks
    width = max((len(c.name) for c in shown), default=0)
    mark_width = max((len(c.mark) for c in shown), default=4)
    lines = [f"{c.mark.ljust(mark_width)}  {c.name.ljust(width)}  {_printable(c.detail)}" for c in shown]
    failed = sum(1 for c in checks if c.passed is False)
    lines.append(f"{_verdict(failed, unsigned)}: {failed} of {len(checks)} checks failed.")
    return "\n".join(lines)


def _verdict(failed: int, unsigned: bool) -> str:
    if failed:
        return "FAILED"
    return "VERIFIED, UNSIGNED (nothing proves who wrote it)" if unsigned else "VERIFIED"


def _unsigned_wording(check: Check) -> Check:
    """"signed sha256" -> "recorded sha256" in an UNSIGNED manifest's checks (a bundle's source checks
    are about the run's own manifest, which may well be signed, and keep their words)."""
    if check.unsigned or check.name.startswith("source"):
        return check
    return replace(check, name=_SIGNED.sub("recorded", check.name), detail=_SIGNED.sub("recorded", check.detail))


_SIGNED = re.compile(r"(?<![A-Za-z])signed(?![A-Za-z])")


def verify_path(path: Path, *, pubkey: Path | None = None, allow_unsigned: bool = False,
                source: Path | None = None) -> list[Check]:
    """Verify a run directory or a bundle file; returns every check (never raises on bad evidence).

    A file in a format this tool does not read is no verdict: UnsupportedFormat is raised."""
    try:
        with opened(path) as directory:
            return verify_dir(directory, pubkey=pubkey, allow_unsigned=allow_unsigned, source=source)
    except UnsupportedFormat:
        raise
    except ReproError as exc:
        return [Check("bundle", False, str(exc))]


class Evidence:
    """What one verification reads, each read once: the recipe and the rows (as a RowTable)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run

    @cached_property
    def recipe(self) -> Recipe:
        return parse_recipe(self.run.file("recipe.yaml").read_text(encoding="utf-8"), "recipe.yaml")

    @cached_property
    def table(self) -> RowTable:
        return read_table(self.run.rows_path)

    def preload(self) -> None:
        """Parse the rows now; a damaged file is reported later by the check that reads it."""
        try:
            self.table  # noqa: B018 (the cached property parses on first access)
        except _BAD_EVIDENCE:
            pass


def verify_dir(directory: Path, *, pubkey: Path | None = None, allow_unsigned: bool = False,
               evidence: Evidence | None = None, source: Path | None = None) -> list[Check]:
    """Every check of a run directory. Nothing is opened unless the whole tree is regular files
    and directories (no links, FIFOs, devices, empty directories), so every name read below
    resolves inside the directory. `evidence` (optional) holds what was read, for the caller to reuse."""
    root = Path(directory)
    try:
        files, problems = scan_tree(root)
    except OSError as exc:
        return [Check("run entries", False, f"cannot list {root}: {exc.strerror or exc}")]
    if problems:
        return [_entries_check(problems)]
    ev = evidence if evidence is not None else Evidence(RunDir(root))
    if not (root / ENVELOPE_NAME).exists() and (root / "import.json").is_file():
        return verify_imported(ev.run, pubkey=pubkey, evidence=ev, source=source)
    try:
        envelope, statement = read_statement(root / ENVELOPE_NAME)
    except _BAD_EVIDENCE as exc:
        return [Check("envelope", False, str(exc))]
    return _verify_signed(ev, files, envelope, statement, pubkey, allow_unsigned)


def _entries_check(problems: list[str]) -> Check:
    more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
    return Check("run entries", False, "only regular files may be in a run or bundle: " + "; ".join(problems[:6]) + more)


def _verify_signed(ev: Evidence, files: list[Path], envelope: dict, statement: dict, pubkey: Path | None,
                   allow_unsigned: bool) -> list[Check]:
    """The checks of a run (or bundle) whose envelope and statement have the shape this tool writes."""
    run, predicate = ev.run, statement["predicate"]
    checks = [Check("envelope", True, "canonical DSSE envelope with an in-toto Statement v1"),
              _signature(envelope, predicate, pubkey, allow_unsigned)]
    present = {p.relative_to(run.path).as_posix() for p in files if p != run.path / ENVELOPE_NAME}
    # Hash every subject in background threads (hashlib releases the GIL) while the rows are parsed.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-hash") as pool:
        hashing = pool.submit(_hash_subjects, statement, run, present)
        ev.preload()  # the rows parse here, while the files hash
        subjects = _subject_digests(statement, present, checks, hashing)
    aggregate_only = bool(predicate.get("aggregate_only"))
    for step in (_complete, _copied_files, _case_ids, _protocol_passes, _responses, _recomputed, _kernel_families,
                 _runtime_identity):
        checks.extend(_signed_step(step, ev, predicate, aggregate_only, checks))
    if aggregate_only:
        checks.extend(_source_manifest(run, predicate, subjects, pubkey))
    return checks


_Step = Callable[[Evidence, dict, bool], list[Check]]


def _runtime_identity(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    """Issue 39: backends.json runtime_identity and kernel_caches.json well-formed (no check when absent)."""
    verdict = runtime_identity_verdict(ev.run)
    return [] if verdict is None else [Check("runtime identity", *verdict)]


def _step_name(step: _Step) -> str:
    return step.__name__.strip("_").replace("_", " ")


def _signed_step(step: _Step, ev: Evidence, predicate: dict, aggregate_only: bool, earlier: list[Check]) -> list[Check]:
    """One content check; damaged evidence (never a bug of this tool) is its failed check."""
    try:
        return step(ev, predicate, aggregate_only)
    except UnsupportedFormat as exc:
        # A file as signed in a newer format: this tool cannot judge the run at all. A file
        # changed after signing (a failed check above) is tampering, reported as such.
        if not any(c.passed is False for c in earlier):
            raise
        return [Check(_step_name(step), False, str(exc))]
    except _DAMAGE as exc:  # damaged evidence is a failed check
        return [Check(_step_name(step), False, f"{type(exc).__name__}: {exc}")]


def _source_manifest(run: RunDir, predicate: dict, subjects: dict[str, str], pubkey: Path | None) -> list[Check]:
    """An aggregate-only bundle's files must be exactly the ones the run itself signed."""
    name = predicate.get("source_envelope")
    omitted = predicate.get("omitted") or []
    if not _safe_name(name) or name not in subjects:
        return [Check("source manifest", False, f"source_envelope {str(name)[:80]!r} is not a signed file of this "
                      "bundle; it must be a relative name inside it, listed as a subject")]
    try:
        envelope, source = read_statement(run.path / str(name))
    except _BAD_EVIDENCE as exc:
        return [Check("source manifest", False, str(exc))]
    signed = {s["name"]: s["digest"]["sha256"] for s in source.get("subject", [])}
    checks = [_source_subjects_check(str(name), subjects, omitted, signed)]
    if envelope["signatures"] and pubkey is not None:
        checks.append(_source_signature(envelope, pubkey))
    checks.append(_omitted_check(omitted))
    return checks


def _source_subjects_check(name: str, subjects: dict[str, str], omitted: list[dict], signed: dict[Any, str]) -> Check:
    wrong: list[Any] = [n for n, digest in subjects.items() if n != name and signed.get(n) != digest]
    wrong += [o.get("name") for o in omitted if signed.get(o.get("name")) != o.get("sha256")]
    if wrong:
        return Check("source manifest", False, f"differ from the run's own manifest: {', '.join(map(str, wrong))}")
    return Check("source manifest", True,
                 f"every file and omitted hash equals the run's signed subject ({len(signed)} subjects)")


def _source_signature(envelope: dict, pubkey: Path) -> Check:
    try:
        verify_envelope(envelope, load_public_key(pubkey))
    except ReproError as exc:
        return Check("source signature", None, f"not by the given key ({exc})")
    return Check("source signature", True, "the run's own manifest is signed by the same key")


def _omitted_check(omitted: list[dict]) -> Check:
    names = ", ".join(sorted({o.get("name", "?").split("/", 1)[0] + "/" for o in omitted})) or "nothing"
    return Check("omitted files", None, f"aggregate-only bundle omits {len(omitted)} files ({names}); "
                 "their hashes are listed but their content cannot be inspected")


# --- imported runs -----------------------------------------------------------------------


def verify_imported(run: RunDir, *, pubkey: Path | None = None, evidence: Evidence | None = None,
                    source: Path | None = None) -> list[Check]:
    """An imported run: the digests its import recorded, the published files if the user names their
    folder (`source`; never the path import.json names, which is the run's word), every statistic.

    No signature is required; one asked for with `pubkey` fails, because an imported run has none.
    """
    ev = evidence if evidence is not None else Evidence(run)
    try:
        record = run.read("import.json")
        status = run.state().get("status")
    except UnsupportedFormat:
        raise
    except _BAD_EVIDENCE as exc:
        return [Check("import record", False, f"{type(exc).__name__}: {exc}")]
    signature = (Check("signature", False, f"a signature by {pubkey} was asked for, but this is an imported run, "
                       "which is never signed (we did not measure it); verify it without --pubkey")
                 if pubkey is not None else
                 Check("signature", None, "imported run: never signed, because we did not measure it; no signature "
                       "is required, and none is checked"))
    checks = [signature,
              Check("import record", status == "imported",
                    f"state.json status {status!r}; imported from {record.get('source')} "
                    f"({record.get('format')} format, import.json format_version {record.get('format_version')})")]
    def imported_source(e: Evidence, r: dict, _: bool) -> list[Check]:
        return _imported_source(e, r, source)

    for step in (_converted_files, imported_source, _case_ids, _responses, _imported_statistics):
        checks.extend(_imported_step(step, ev, record))
    return checks


def _imported_step(step: _Step, ev: Evidence, record: dict) -> list[Check]:
    """One check of an imported run; a file in a format this tool does not read is no verdict."""
    try:
        return step(ev, record, False)
    except UnsupportedFormat:
        raise
    except _DAMAGE as exc:
        return [Check(_step_name(step), False, f"{type(exc).__name__}: {exc}")]


def _converted_files(ev: Evidence, record: dict, _: bool) -> list[Check]:
    from .imports.run import REPORT_FILES

    run = ev.run
    recorded = record.get("converted")
    if not isinstance(recorded, dict):
        return [Check("converted files", None, "import.json format 1 records no digests of the converted files; "
                      "import again to record them")]
    bad = []
    for name, want in sorted(recorded.items()):
        path = run.path / name
        if not _safe_name(name) or not path.is_file():
            bad.append(f"{name} is recorded but absent")
        elif hash_file(path) != want:
            bad.append(f"{name} has a different sha256 than recorded at import")
    present = {p.relative_to(run.path).as_posix() for p in run.evidence_files()}
    unlisted = sorted(present - set(recorded) - {"state.json", "import.json"} - REPORT_FILES)
    bad += [f"{name} was not written by the import" for name in unlisted]
    return [Check("converted files", not bad, "; ".join(bad[:6]) if bad
                  else f"{len(recorded)} converted files match the sha256 recorded at import")]


def _imported_source(ev: Evidence, record: dict, source: Path | None) -> list[Check]:
    entries = _record_field(record, "source_manifest", dict, {})
    verified = _recorded_names(record, "verified", list(entries))
    if source is None:  # a path inside import.json is never followed: the run is unsigned, so it is its word
        return [Check("source files", None, f"not re-hashed: pass --source DIR to check the published files "
                      f"(imported from {record.get('source')}) again; at import {len(verified)} were checked "
                      "against their digests")]
    root = Path(source)
    if not root.is_dir():
        return [Check("source files", False, f"--source {root} is not a directory")]
    digests = record.get("digests_file") or "manifest.json"
    imported: dict = record["imported_files"] if isinstance(record.get("imported_files"), dict) else {}
    bad = _rehashed(root, [(name, _listed_sha256(entries.get(name))) for name in verified],
                    "was verified at import but is absent now", f"differs from the sha256 their {digests} lists")
    bad += _rehashed(root, sorted(imported.items()), "was imported but is absent now",
                     "differs from the sha256 recorded at import")
    if bad:
        return [Check("source files", False, "; ".join(bad[:6]))]
    return [Check("source files", True, _source_detail(record, root, len(verified), len(imported), digests))]


def _source_detail(record: dict, root: Path, verified: int, imported: int, digests: str) -> str:
    if record.get("provenance", "verified") != "verified":
        return (f"{record.get('provenance')}; the {imported} files imported from {root} still match "
                "the sha256 recorded at import")
    return f"{verified} source files at {root} still match their {digests} digests"


def _listed_sha256(entry: Any) -> Any:
    """A source manifest entry's sha256: the entry itself, or its "sha256" field."""
    return entry.get("sha256") if isinstance(entry, dict) else entry


def _rehashed(root: Path, expected: Iterable[tuple[Any, Any]], absent: str, differs: str) -> list[str]:
    """'NAME ABSENT' or 'NAME DIFFERS' for each (name, sha256) whose file under root is not there or not that."""
    bad = []
    for name, want in expected:
        path = root / name if _safe_name(name) else None
        if path is None or not path.is_file():
            bad.append(f"{name} {absent}")
        elif hash_file(path) != want:
            bad.append(f"{name} {differs}")
    return bad


def _imported_statistics(ev: Evidence, record: dict, _: bool) -> list[Check]:
    from ..results.statistics import summarize

    run, t = ev.run, ev.table
    ours = json.loads(json.dumps(summarize(t, ev.recipe).to_json(), allow_nan=False))
    diff = first_difference(ours, run.read("summary.json"))
    checks = [Check("statistics recomputed", diff is None,
                    f"recomputed from rows differs from summary.json at {diff}" if diff
                    else "every statistic recomputed from rows.jsonl equals summary.json exactly")]
    if record.get("format_version") == 1:
        return checks + [Check("published figures", None, "import.json format 1: re-import to record figure status")]
    figures = _record_field(record, "figures", list, [])
    if record.get("format", "system1-omni") != "system1-omni":
        published = _record_field(record, "published_summary", dict, {})
        recomputed = json.loads(json.dumps(layout_figures(str(record.get("format")), published,
                                                          _imported_samples(run))))
    else:
        recomputed = _system1_figures(ev, _checked_figures(figures))
    return checks + [_figures_check(recomputed, figures, record)]


def _system1_figures(ev: Evidence, figures: list[dict]) -> list:
    """The figures of a system1-omni import recomputed from its rows (in file order within each
    (arm, pass), as the import appended them) and the probability deltas its responses keep."""
    t = ev.table
    latencies = {(backend, index): t.latency_ms[idx].tolist() for (backend, index), idx in
                 t.groups(np.flatnonzero(t.phase.equals("measured")), ("backend", "pass_index")).items()}
    deltas: dict[tuple[str, int], float] = {}
    for where, entry in _imported_entries(ev.run):
        if "probability_delta" in entry:
            backend, index, delta = _entry_fields(entry, where, ("backend", _NAME), ("pass_index", _INDEX),
                                                  ("probability_delta", _NUMBER))
            deltas[(backend, index)] = max(deltas.get((backend, index), 0.0), abs(delta))
    return json.loads(json.dumps(published_figures(summary_from_figures(figures), latencies, deltas)))


def _figures_check(recomputed: list, figures: list, record: dict) -> Check:
    diff = first_difference(recomputed, figures)
    counts = _record_field(record, "figure_counts", dict, {})
    return Check("published figures", diff is None,
                 f"recomputed figures differ from import.json at {diff}" if diff else
                 f"{len(figures)} published figures recomputed from the rows: {counts.get('exact')} exact, "
                 f"{counts.get('within_rounding')} within rounding, {counts.get('mismatch')} mismatch")


def _imported_samples(run: RunDir) -> Samples:
    """The published seconds and decisions the import kept in responses/, per (arm, workload, pass)."""
    samples: Samples = {}
    for where, entry in _imported_entries(run):
        backend, workload, index, seconds, decisions = _entry_fields(
            entry, where, ("backend", _NAME), ("workload", _NAME), ("pass_index", _INDEX), ("seconds", _NUMBER_TEXT),
            ("decisions", _NUMBER_TEXT))
        samples.setdefault((backend, workload, index), []).append((float(seconds), int(decisions)))
    return samples


# --- the kinds of what an imported run's files hold (checked before a check reads them) ---------------

_KIND_NAMES: dict[type, str] = {dict: "an object", list: "a list"}
_KEY = (str, int, float)  # a value that names a row: a JSON scalar (never an array or object)
_NAME = (str,)  # an arm or workload of a responses line, as the import writes it
_INDEX = (int,)  # a pass number, as the import writes it
_NUMBER = (int, float)
_NUMBER_TEXT = (int, float, str)  # converted with float() or int(), which refuse bad text with a ValueError


_FIELD_KINDS = {_NAME: "a name", _INDEX: "a whole number", _NUMBER: "a number", _NUMBER_TEXT: "a number"}


def _record_field(record: dict, name: str, kind: type, default: Any) -> Any:
    """import.json's `name` (`default` when absent or empty); EvidenceError when it is not of `kind`."""
    value = record.get(name) or default
    if not isinstance(value, kind):
        raise EvidenceError(f"import.json: {name} is not {_KIND_NAMES[kind]}")
    return value


def _recorded_names(record: dict, name: str, default: list) -> list:
    """import.json's list of file names `name` (`default` when absent or empty)."""
    names = _record_field(record, name, list, default)
    if not all(isinstance(n, str) for n in names):
        raise EvidenceError(f"import.json: {name} is not a list of file names")
    return names


def _checked_figures(figures: list) -> list[dict]:
    """import.json's system1-omni figures, each with the fields `summary_from_figures` reads."""
    for i, figure in enumerate(figures):
        problem = _figure_problem(figure)
        if problem:
            raise EvidenceError(f"import.json: figures[{i}] {problem}")
    return figures


def _figure_problem(figure: Any) -> str | None:
    if not isinstance(figure, dict) or not isinstance(figure.get("figure"), str):
        return "is not an object with a figure name"
    missing = [name for name in _figure_fields(figure) if name not in figure]
    if missing:
        return f"lacks {' and '.join(missing)}"
    if not all(isinstance(figure.get(name), (*_KEY, type(None))) for name in ("arm", "pass")):
        return "has an arm or pass that is not a name or number"
    return None


def _figure_fields(figure: dict) -> tuple[str, ...]:
    """The fields `summary_from_figures` reads of this figure."""
    if figure["figure"].endswith("_reduction_percent"):
        return ("published",)
    if figure.get("arm") is None or figure["figure"] == "rows":
        return ("arm",)
    return ("arm", "pass", "published")


def _imported_entries(run: RunDir) -> Iterator[tuple[str, dict]]:
    """('FILE:LINE', entry) of each responses/*.jsonl line of an imported run, in a format this tool reads."""
    for path in sorted(run.path.glob("responses/*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            where = f"{path.name}:{number}"
            yield where, check_response_entry(json.loads(line), where)


def _entry_fields(entry: dict, where: str, *fields: tuple[str, tuple[type, ...]]) -> tuple:
    """The values of `fields` ((name, kinds) pairs) of a responses line; EvidenceError naming the first
    that is absent or of another kind."""
    for name, kinds in fields:
        if not isinstance(entry.get(name), kinds):
            raise EvidenceError(f"{where}: {name} is absent or not {_FIELD_KINDS[kinds]}")
    return tuple(entry[name] for name, _ in fields)


# --- signature and digests -------------------------------------------------------------


def _signature(envelope: dict, predicate: dict, pubkey: Path | None, allow_unsigned: bool) -> Check:
    signed = bool(envelope["signatures"])
    if signed != bool(predicate.get("signed")):
        return Check("signature", False, f"the predicate says signed={predicate.get('signed')!r} "
                                         f"but the envelope has {len(envelope['signatures'])} signatures")
    if not signed:
        if allow_unsigned:
            return Check("signature", True, "UNSIGNED manifest, accepted because --allow-unsigned was given; "
                         "the checks below are against what it records", unsigned=True)
        return Check("signature", False, "the run is UNSIGNED; pass --allow-unsigned to check the rest anyway")
    if pubkey is None:
        return Check("signature", False, "the run is signed; pass --pubkey FILE to check the signature")
    if len(envelope["signatures"]) != 1:
        return Check("signature", False, f"the envelope holds {len(envelope['signatures'])} signatures; "
                                         "openjev-repro signs with exactly one, so the others are not ours")
    try:
        keyid = verify_envelope(envelope, load_public_key(pubkey))
    except ReproError as exc:
        return Check("signature", False, str(exc))
    return Check("signature", True, f"Ed25519 signature by key {keyid[:16]}… over the DSSE PAE")


def _safe_name(name: Any) -> bool:
    if not isinstance(name, str) or not name or "\\" in name:
        return False
    parts = name.split("/")
    return not name.startswith("/") and not {"..", ".", ""} & set(parts) and name != ENVELOPE_NAME


def _hash_subjects(statement: dict, run: RunDir, present: set[str]) -> dict[str, str]:
    """sha256 of every listed subject the walk found as a regular file, hashed in parallel."""
    names = {s.get("name") for s in statement.get("subject") or [] if isinstance(s, dict)}
    paths = {name: run.path / name for name in names if _safe_name(name) and name in present}
    digests = hash_files(paths.values())
    return {name: digests[path] for name, path in paths.items()}


def _subject_digests(statement: dict, present: set[str], checks: list[Check], hashing: Future) -> dict[str, str]:
    subjects = statement.get("subject") or []
    bad: list[str] = []
    try:
        digests = hashing.result()
    except ReproError as exc:  # a file vanished or cannot be read while hashing
        digests = {}
        bad.append(str(exc))
    listed = _listed_subjects(subjects, present, digests, bad)
    names = [s.get("name") for s in subjects if isinstance(s, dict)]
    if len(set(names)) != len(names):
        bad.append("a subject is listed twice")
    checks.append(Check("subject digests", not bad and bool(listed),
                        "; ".join(bad) if bad else f"{len(listed)} files match their signed sha256"))
    unlisted = sorted(present - set(listed))
    checks.append(Check("no unlisted files", not unlisted,
                        f"not in the manifest: {', '.join(unlisted[:10])}" if unlisted
                        else "every file is a subject (hidden names included; only regular files)"))
    return listed


def _subject_name_and_sha256(subject: Any) -> tuple[Any, Any]:
    if not isinstance(subject, dict):
        return None, None
    return subject.get("name"), (subject.get("digest") or {}).get("sha256")


def _listed_subjects(subjects: list, present: set[str], digests: dict[str, str], bad: list[str]) -> dict[str, str]:
    """name -> signed sha256 of each well-formed subject; what is wrong with any subject goes to `bad`."""
    listed: dict[str, str] = {}
    for s in subjects:
        name, want = _subject_name_and_sha256(s)
        if not isinstance(name, str) or not _safe_name(name) or not isinstance(want, str):
            bad.append(f"malformed subject {str(s)[:80]!r}")
            continue
        if name not in present or name not in digests:  # only files the walk found: never through a link
            bad.append(f"{name} is listed but absent")
        elif digests[name] != want:
            bad.append(f"{name} has a different sha256 than signed")
        listed[name] = want
    return listed


# --- run content -----------------------------------------------------------------------


def _complete(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    state = ev.run.state()
    ok = state.get("status") == "complete" and state == predicate.get("state")
    return [Check("run complete", ok, f"state.json status {state.get('status')!r}"
                  + ("" if state == predicate.get("state") else "; differs from the signed state"))]


def _copied_files(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    """Files whose content the predicate carries must equal it."""
    run = ev.run
    problems = []
    recipe_bytes = run.file("recipe.yaml").read_bytes()
    if hashlib.sha256(recipe_bytes).hexdigest() != predicate.get("recipe_sha256"):
        problems.append("recipe.yaml sha256")
    if _recorded_recipe(recipe_bytes) != predicate.get("recipe"):
        problems.append("recipe.yaml content")
    if run.read("summary.json") != predicate.get("summary"):
        problems.append("summary.json")
    problems += [name for key, name in OPTIONAL_FILES.items() if not _copy_matches(run, name, predicate.get(key))]
    return [Check("signed copies", not problems, "differ from the signed predicate: " + ", ".join(problems)
                  if problems else "recipe, summary and run files equal the signed predicate")]


def _recorded_recipe(recipe_bytes: bytes) -> Any:
    """recipe.yaml as a predicate records it; EvidenceError for YAML that JSON cannot hold (bytes, sets, date keys)."""
    try:
        return recipe_json(recipe_bytes)
    except TypeError as exc:  # raised by json.dumps on the file's values, never by this tool's own code
        raise EvidenceError(str(exc)) from None


def _copy_matches(run: RunDir, name: str, signed: Any) -> bool:
    """An optional run file equals its signed copy (or is absent, as the predicate records)."""
    if not run.file(name).is_file():
        on_disk = None
    else:
        on_disk = run.read(name) if name in READABLE_VERSIONS else read_json(run.file(name))
    absent_signed = isinstance(signed, dict) and signed.get("available") is False and on_disk is None
    return absent_signed or on_disk == signed


def _timed_passes(t: RowTable) -> dict[tuple, np.ndarray]:
    timed = np.flatnonzero(t.phase.equals("measured") | t.phase.equals("feasibility"))
    return t.groups(timed, ("workload", "backend", "phase", "pass_index"))


def _first(codes: Iterable[int], t: RowTable, n: int = 5) -> str:
    """The first n ids (sorted) of some id codes, comma separated."""
    return ", ".join(sorted(str(t.ids.values[c]) for c in codes)[:n])


def check_case_ids(rows: RowTable | Iterable[Row], repeats: dict[str, int]) -> list[str]:
    """Problems with case ids: each timed pass holds the same ids, each `repeat` times, seq 0..n-1."""
    t = as_table(rows)
    passes = _timed_passes(t)
    reference: dict[str, set[int]] = {}
    problems = []
    for key in sorted(passes):
        workload, backend, phase, index = key
        group = passes[key]
        where = f"{backend}/{workload} {phase} pass {index}"
        if not np.array_equal(t.seq[group], np.arange(len(group))):
            problems.append(f"{where}: seq is not 0..{len(group) - 1}")
        codes, counts = np.unique(t.ids.codes[group], return_counts=True)
        repeat = repeats.get(workload, 1)
        dupes, short = codes[counts > repeat].tolist(), codes[counts < repeat].tolist()
        if dupes:
            problems.append(f"{where}: duplicate case ids {_first(dupes, t)}")
        if short:
            problems.append(f"{where}: case ids seen fewer than {repeat} times {_first(short, t)}")
        present = set(codes.tolist())
        ref = reference.setdefault(workload, present)
        missing, extra = ref - present, present - ref
        if missing:
            problems.append(f"{where}: missing case ids {_first(missing, t)}")
        if extra:
            problems.append(f"{where}: case ids absent from other passes {_first(extra, t)}")
    return problems


def check_planned_order(rows: RowTable | Iterable[Row], planned: dict[str, list[str]] | None) -> list[str]:
    """Each timed pass holds exactly the planned case ids in the planned order (plan.json case_ids)."""
    if not planned:
        return []
    t = as_table(rows)
    lookup = t.ids.lookup()
    expected_codes = {w: np.array([lookup.get(i, -1) for i in ids], dtype=np.int64) for w, ids in planned.items()}
    problems = []
    for (workload, backend, phase, index), group in sorted(_timed_passes(t).items()):
        expected = planned.get(workload)
        if expected is not None and not np.array_equal(t.ids.codes[group], expected_codes[workload]):
            missing = sorted(set(expected) - set(t.ids.strings(group)))
            detail = f"missing {', '.join(missing[:5])}" if missing else "order or count differs"
            problems.append(f"{backend}/{workload} {phase} pass {index}: not the planned requests ({detail})")
    return problems


def _case_ids(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    run, rows = ev.run, ev.table
    problems = check_case_ids(rows, {w.name: w.repeat for w in ev.recipe.workloads})
    plan = run.read("plan.json") if run.file("plan.json").is_file() else {}
    problems += check_planned_order(rows, _planned_case_ids(plan))
    return [Check("case ids", not problems, "; ".join(problems[:6]) if problems
                  else f"{len(rows)} rows; every timed pass holds the same case ids")]


def _planned_case_ids(plan: dict) -> dict[str, list[str]] | None:
    """plan.json's case_ids (workload -> ids in order); EvidenceError when it is not that."""
    planned = plan.get("case_ids")
    if planned and not (isinstance(planned, dict) and all(
            isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in planned.values())):
        raise EvidenceError("plan.json: case_ids is not an object of case id lists, one per workload")
    return planned


def _protocol_passes(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    """Every (workload, backend) of the recipe ran exactly its declared passes, numbered 1..N, and nothing else:
    a key holder who drops or adds a measured pass and re-signs is caught here."""
    recipe, rows = ev.recipe, ev.table
    problems = []
    for phase, index in (("feasibility", 0), ("measured", 1)):
        found = {key: sorted(passes) for key, passes in rows.by_pass(phase).items()}
        for workload in recipe.workloads:
            want = list(range(1, recipe.passes_for(workload)[index] + 1))
            for backend in recipe.backends:
                have = found.pop((workload.name, backend.name), [])
                if have != want:
                    problems.append(f"{workload.name}/{backend.name}: {phase} passes {have or 'none'}, "
                                    f"the recipe declares {len(want)}")
        problems += [f"{w}/{b}: {phase} passes {p} of a workload or backend the recipe does not declare"
                     for (w, b), p in found.items()]
    return [Check("protocol passes", not problems, "; ".join(problems[:6]) if problems
                  else "every workload and backend ran the passes its recipe declares")]


class _ResponseEntry(msgspec.Struct):
    """The fields of a responses/*.jsonl line that verify reads (others are ignored)."""

    backend: Any = msgspec.UNSET
    workload: Any = msgspec.UNSET
    phase: Any = msgspec.UNSET
    pass_index: Any = msgspec.UNSET
    seq: Any = msgspec.UNSET
    body: Any = msgspec.UNSET
    body_base64: Any = msgspec.UNSET
    v: Any = msgspec.UNSET  # absent in format 1


_RESPONSE = msgspec.json.Decoder(_ResponseEntry)
_KEY_FIELDS = ("backend", "workload", "phase", "pass_index", "seq")


def _responses(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    if aggregate_only:
        return [Check("response bodies", None, "aggregate-only bundle: bodies are omitted (JevBench terms), "
                      "so row body_sha256 values cannot be checked against them")]
    t = ev.table
    keys = zip(t.backend.strings(), t.workload.strings(), t.phase.strings(), t.pass_index.tolist(), t.seq.tolist(), strict=True)
    hashes = dict(zip(keys, t.body_sha256, strict=True))
    wrong, seen = [], 0
    for path in sorted(ev.run.path.glob("responses/*.jsonl")):
        for before, entries in _response_chunks(path):
            at = _body_lines(path, before, entries)
            seen += len(at)
            wrong += _wrong_bodies(path, before, at, [entries[i] for i in at], hashes)
    return [Check("response bodies", not wrong, f"bodies whose sha256 differs from their row: {', '.join(wrong[:5])}"
                  if wrong else f"{seen} bodies match their rows' body_sha256")]


def _body_lines(path: Path, before: int, entries: list[_ResponseEntry]) -> list[int]:
    """Indices of the chunk's entries that carry a body, each checked for the fields that find its row.

    UnsupportedFormat for an entry in a newer format; EvidenceError for one that lacks a key field or
    whose body or key is not a JSON value of the kind written."""
    newer = next((i for i, e in enumerate(entries) if e.v is not msgspec.UNSET and e.v not in RESPONSE_VERSIONS), None)
    if newer is not None:
        check_response_entry({"v": entries[newer].v}, f"{path.name}:{before + newer + 1}")
    at = [i for i, e in enumerate(entries) if e.body is not msgspec.UNSET or e.body_base64 is not msgspec.UNSET]
    for i in at:
        problem = _entry_problem(entries[i])
        if problem:
            raise EvidenceError(f"{path.name}:{before + i + 1} {problem}")
    return at


def _entry_problem(e: _ResponseEntry) -> str | None:
    keys = tuple(getattr(e, name) for name in _KEY_FIELDS)
    if msgspec.UNSET in keys:
        return f"lacks one of {', '.join(_KEY_FIELDS)}"
    if any(isinstance(k, (list, dict)) for k in keys):
        return f"has an array or object as one of {', '.join(_KEY_FIELDS)}"
    body = e.body if e.body is not msgspec.UNSET else e.body_base64
    if not isinstance(body, str):
        return "has a body that is not a string"
    return None


def _wrong_bodies(path: Path, before: int, at: list[int], have: list[_ResponseEntry], hashes: dict) -> list[str]:
    """'FILE:LINE' of each body whose sha256 is not its row's body_sha256 (C loops throughout: encode, hash,
    look up, compare)."""
    bodies = [e.body.encode("utf-8") if e.body is not msgspec.UNSET else base64.b64decode(e.body_base64) for e in have]
    digests = map(operator.methodcaller("hexdigest"), map(hashlib.sha256, bodies))
    expected = map(hashes.get, zip(*(map(operator.attrgetter(name), have) for name in _KEY_FIELDS), strict=True))
    return [f"{path.name}:{before + i + 1}" for i, got, want in zip(at, digests, expected, strict=True) if got != want]


def _response_chunks(path: Path) -> Iterator[tuple[int, list[_ResponseEntry]]]:
    """(lines before the chunk, entries of its lines), decoded 8 MiB at a time with one entry per line.

    A chunk with a blank or undecodable line is decoded line by line instead, so the error
    names its line, as it always did."""
    before = 0
    for chunk in chunks(path, CHUNK_BYTES):
        n_lines = chunk.count(b"\n") + (not chunk.endswith(b"\n"))
        try:
            entries = _RESPONSE.decode_lines(chunk)
        except msgspec.DecodeError:
            entries = []
        if len(entries) != n_lines:
            entries = []
            for offset, line in enumerate(chunk.splitlines()):
                try:
                    entries.append(_RESPONSE.decode(line))
                except msgspec.DecodeError as exc:
                    raise EvidenceError(f"{path.name}:{before + offset + 1}: not a JSON object ({exc})") from exc
        yield before, entries
        before += n_lines


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first JSON path where two values differ, with both values; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return _first_key_difference(a, b, path)
    if isinstance(a, list) and isinstance(b, list):
        return _first_item_difference(a, b, path)
    return None if (a == b and type(a) is type(b)) else f"{path or '(top)'}: {a!r} vs {b!r}"


def _first_key_difference(a: dict, b: dict, path: str) -> str | None:
    for key in sorted(set(a) | set(b), key=str):
        if key not in a or key not in b:
            return f"{path}.{key}: present on one side only"
        diff = first_difference(a[key], b[key], f"{path}.{key}")
        if diff:
            return diff
    return None


def _first_item_difference(a: list, b: list, path: str) -> str | None:
    if len(a) != len(b):
        return f"{path}: {len(a)} vs {len(b)} items"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        diff = first_difference(x, y, f"{path}[{i}]")
        if diff:
            return diff
    return None


def _recomputed(ev: Evidence, predicate: dict, aggregate_only: bool,
                summarize: Callable[..., Summary] | None = None) -> list[Check]:
    if summarize is None:
        from ..results.statistics import summarize as recompute

        summarize = recompute
    # Round-trip through JSON so recomputed and stored values are compared as written.
    # Energy and GPU state come from gpu.jsonl (runs from 2026-12 on); older runs have neither.
    gpu_path = ev.run.file(GPU_FILE)
    gpu = read_gpu_events(gpu_path) if gpu_path.is_file() else None
    # kernel-families.json, recomputed from traces/ by kernel_families_recomputed
    ours = json.loads(json.dumps(summarize(ev.table, ev.recipe, gpu=gpu, **trace_inputs(ev.run.path)).to_json(),
                                 allow_nan=False))
    stats_ours = {k: v for k, v in ours.items() if k != "gates"}
    stats_signed = {k: v for k, v in (predicate.get("summary") or {}).items() if k != "gates"}
    checks = []
    diff = first_difference(stats_ours, stats_signed)
    checks.append(Check("statistics recomputed", diff is None,
                        f"recomputed from rows differs from the signed summary at {diff}" if diff
                        else "every statistic recomputed from rows.jsonl equals the signed value exactly"))
    diff = first_difference(ours.get("gates"), predicate.get("gates"))
    checks.append(Check("gates recomputed", diff is None,
                        f"recomputed gate outcomes differ at {diff}" if diff
                        else f"{len(ours.get('gates', []))} gate outcomes equal the signed ones"))
    return checks + _load_levels(ev, predicate, aggregate_only)  # load runs only


def _kernel_families(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    return [Check(*outcome) for outcome in _trace_outcomes(ev.run.path, ev.recipe, aggregate_only, first_difference)]


def _load_levels(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    """Load runs only (no check for a recipe without a load): the rows are the declared levels with their
    passes and schedules, and every per-level figure recomputed from them equals the signed `load` section."""
    from ..results.load import has_load, load_summary
    from ..results.load_protocol import level_problems

    if not has_load(ev.recipe):
        return []
    problems = level_problems(ev.table, ev.recipe)
    load = load_summary(ev.table, ev.recipe)
    ours = json.loads(json.dumps(load.to_json() if load is not None else {}, allow_nan=False))
    signed = (predicate.get("summary") or {}).get("load")
    diff = first_difference(ours, signed, "load") if isinstance(signed, dict) else "load: absent from the signed summary"
    figures = sum(len(wl["levels"]) * len(wl["backends"]) for wl in ours["workloads"].values())
    return [Check("load levels", not problems, "; ".join(problems[:6]) if problems
                  else "every load workload ran its declared levels, each with its passes and schedule"),
            Check("load levels recomputed", diff is None, f"recomputed from rows differs from the signed summary at {diff}"
                  if diff else f"{figures} (backend, level) figure sets recomputed from rows.jsonl equal the signed ones")]

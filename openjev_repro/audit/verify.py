"""`verify`: check a signed run (or an aggregate-only bundle) from its bytes alone.

Checks, in order: the envelope's form; the signature; every subject digest; no evidence
file outside the subjects; the run is complete; the copied run files equal the signed
ones; case ids; response bodies against row hashes; and every statistic and gate
recomputed from rows.jsonl + recipe.yaml (`results.summarize`) equals the signed value
and summary.json exactly. A check is PASS, FAIL, or N/A (an aggregate-only bundle
cannot make it, and says why).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import ReproError
from ..evidence import ENVELOPE_NAME, RunDir, read_json, scan_tree
from ..manifest.dsse import verify_envelope
from ..manifest.keys import load_public_key
from ..manifest.statement import OPTIONAL_FILES, read_statement, recipe_json, sha256_file
from ..recipe import parse_recipe
from ..rows import Row, read_rows
from .bundle import opened

__all__ = ["Check", "verify_path", "verify_dir", "verify_imported", "format_checks", "first_difference",
           "check_case_ids"]


# What damaged files raise while being read (JSON and UTF-8 errors are ValueErrors).
_BAD_EVIDENCE = (ReproError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError, OSError)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None  # None: this bundle cannot make the check
    detail: str

    @property
    def mark(self) -> str:
        return {True: "PASS", False: "FAIL", None: "N/A "}[self.passed]


def format_checks(checks: list[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    lines = [f"{c.mark}  {c.name.ljust(width)}  {c.detail}" for c in checks]
    failed = sum(1 for c in checks if c.passed is False)
    lines.append(f"{'FAILED' if failed else 'VERIFIED'}: {failed} of {len(checks)} checks failed.")
    return "\n".join(lines)


def verify_path(path: Path, *, pubkey: Path | None = None, allow_unsigned: bool = False) -> list[Check]:
    """Verify a run directory or a bundle file; returns every check (never raises on bad evidence)."""
    try:
        with opened(path) as directory:
            return verify_dir(directory, pubkey=pubkey, allow_unsigned=allow_unsigned)
    except ReproError as exc:
        return [Check("bundle", False, str(exc))]


def verify_dir(directory: Path, *, pubkey: Path | None = None, allow_unsigned: bool = False) -> list[Check]:
    """Every check of a run directory. Nothing is opened unless the whole tree is regular files
    and directories (no links, FIFOs, devices, empty directories), so every name read below
    resolves inside the directory."""
    root = Path(directory)
    try:
        files, problems = scan_tree(root)
    except OSError as exc:
        return [Check("run entries", False, f"cannot list {root}: {exc.strerror or exc}")]
    if problems:
        return [Check("run entries", False, "only regular files may be in a run or bundle: " + "; ".join(problems[:6])
                      + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""))]
    if not (root / ENVELOPE_NAME).exists() and (root / "import.json").is_file():
        return verify_imported(RunDir(root), pubkey=pubkey)
    try:
        envelope, statement = read_statement(root / ENVELOPE_NAME)
    except _BAD_EVIDENCE as exc:
        return [Check("envelope", False, str(exc))]
    checks = [Check("envelope", True, "canonical DSSE envelope with an in-toto Statement v1")]
    predicate = statement["predicate"]
    checks.append(_signature(envelope, predicate, pubkey, allow_unsigned))
    run = RunDir(root)
    present = {p.relative_to(root).as_posix() for p in files if p != root / ENVELOPE_NAME}
    subjects = _subject_digests(statement, run, present, checks)
    aggregate_only = bool(predicate.get("aggregate_only"))
    for step in (_complete, _copied_files, _case_ids, _responses, _recomputed):
        try:
            checks.extend(step(run, predicate, aggregate_only))
        except (*_BAD_EVIDENCE, RecursionError, MemoryError) as exc:  # damaged evidence is a failed check
            checks.append(Check(step.__name__.strip("_").replace("_", " "), False, f"{type(exc).__name__}: {exc}"))
    if aggregate_only:
        checks.extend(_source_manifest(run, predicate, subjects, pubkey))
    return checks


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
    wrong = [n for n, digest in subjects.items() if n != name and signed.get(n) != digest]
    wrong += [o.get("name") for o in omitted if signed.get(o.get("name")) != o.get("sha256")]
    checks = [Check("source manifest", not wrong, f"differ from the run's own manifest: {', '.join(map(str, wrong))}"
                    if wrong else f"every file and omitted hash equals the run's signed subject ({len(signed)} subjects)")]
    if envelope["signatures"] and pubkey is not None:
        try:
            verify_envelope(envelope, load_public_key(pubkey))
            checks.append(Check("source signature", True, "the run's own manifest is signed by the same key"))
        except ReproError as exc:
            checks.append(Check("source signature", None, f"not by the given key ({exc})"))
    names = ", ".join(sorted({o.get("name", "?").split("/", 1)[0] + "/" for o in omitted})) or "nothing"
    checks.append(Check("omitted files", None, f"aggregate-only bundle omits {len(omitted)} files ({names}); "
                        "their hashes are listed but their content cannot be inspected"))
    return checks


# --- imported runs -----------------------------------------------------------------------


def verify_imported(run: RunDir, *, pubkey: Path | None = None) -> list[Check]:
    """An imported run: the digests its import recorded, the source if still present, every statistic.

    No signature is required; one asked for with `pubkey` fails, because an imported run has none.
    """
    try:
        record = read_json(run.file("import.json"))
        status = run.state().get("status")
        if not isinstance(record, dict) or record.get("format_version") not in (1, 2):
            raise ValueError("import.json is not an import record of format_version 1 or 2")
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
    for step in (_converted_files, _imported_source, _case_ids, _responses, _imported_statistics):
        try:
            checks.extend(step(run, record, False))
        except _BAD_EVIDENCE as exc:
            checks.append(Check(step.__name__.strip("_").replace("_", " "), False, f"{type(exc).__name__}: {exc}"))
    return checks


def _converted_files(run: RunDir, record: dict, _: bool) -> list[Check]:
    from .importer import REPORT_FILES

    recorded = record.get("converted")
    if not isinstance(recorded, dict):
        return [Check("converted files", None, "import.json format 1 records no digests of the converted files; "
                      "import again to record them")]
    bad = []
    for name, want in sorted(recorded.items()):
        path = run.path / name
        if not _safe_name(name) or not path.is_file():
            bad.append(f"{name} is recorded but absent")
        elif sha256_file(path) != want:
            bad.append(f"{name} has a different sha256 than recorded at import")
    present = {p.relative_to(run.path).as_posix() for p in run.evidence_files()}
    unlisted = sorted(present - set(recorded) - {"state.json", "import.json"} - REPORT_FILES)
    bad += [f"{name} was not written by the import" for name in unlisted]
    return [Check("converted files", not bad, "; ".join(bad[:6]) if bad
                  else f"{len(recorded)} converted files match the sha256 recorded at import")]


def _imported_source(run: RunDir, record: dict, _: bool) -> list[Check]:
    root = Path(str(record.get("source")))
    entries = record.get("source_manifest") or {}
    verified = record.get("verified") or [n for n in entries]
    if not root.is_dir():
        return [Check("source files", None, f"the source {root} is not present here; its files were checked "
                      f"against their manifest.json at import ({len(verified)} files)")]
    bad = []
    for name in verified:
        entry = entries.get(name)
        want = entry.get("sha256") if isinstance(entry, dict) else entry
        path = root / name
        if not _safe_name(name) or not path.is_file():
            bad.append(f"{name} was verified at import but is absent now")
        elif sha256_file(path) != want:
            bad.append(f"{name} differs from the sha256 their manifest.json lists")
    return [Check("source files", not bad, "; ".join(bad[:6]) if bad else
                  f"{len(verified)} source files at {root} still match their manifest.json digests")]


def _imported_statistics(run: RunDir, record: dict, _: bool) -> list[Check]:
    from ..results import summarize
    from .importer import published_figures, summary_from_figures

    recipe = parse_recipe(run.file("recipe.yaml").read_text(encoding="utf-8"), "recipe.yaml")
    rows = read_rows(run.rows_path)
    ours = json.loads(json.dumps(summarize(rows, recipe), allow_nan=False))
    diff = first_difference(ours, read_json(run.file("summary.json")))
    checks = [Check("statistics recomputed", diff is None,
                    f"recomputed from rows differs from summary.json at {diff}" if diff
                    else "every statistic recomputed from rows.jsonl equals summary.json exactly")]
    figures = record.get("figures") or []
    if record.get("format_version") == 1:
        return checks + [Check("published figures", None, "import.json format 1: re-import to record figure status")]
    latencies: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        if r.phase == "measured":
            latencies.setdefault((r.backend, r.pass_index), []).append(r.latency_ms)
    deltas: dict[tuple[str, int], float] = {}
    for path in sorted(run.path.glob("responses/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "probability_delta" in entry:
                key = (entry["backend"], entry["pass_index"])
                deltas[key] = max(deltas.get(key, 0.0), abs(entry["probability_delta"]))
    recomputed = json.loads(json.dumps(published_figures(summary_from_figures(figures), latencies, deltas)))
    diff = first_difference(recomputed, figures)
    counts = record.get("figure_counts") or {}
    checks.append(Check("published figures", diff is None,
                        f"recomputed figures differ from import.json at {diff}" if diff else
                        f"{len(figures)} published figures recomputed from the rows: {counts.get('exact')} exact, "
                        f"{counts.get('within_rounding')} within rounding, {counts.get('mismatch')} mismatch"))
    return checks


# --- signature and digests -------------------------------------------------------------


def _signature(envelope: dict, predicate: dict, pubkey: Path | None, allow_unsigned: bool) -> Check:
    signed = bool(envelope["signatures"])
    if signed != bool(predicate.get("signed")):
        return Check("signature", False, f"the predicate says signed={predicate.get('signed')!r} "
                                         f"but the envelope has {len(envelope['signatures'])} signatures")
    if not signed:
        if allow_unsigned:
            return Check("signature", True, "UNSIGNED run, accepted because --allow-unsigned was given")
        return Check("signature", False, "the run is UNSIGNED; pass --allow-unsigned to check the rest anyway")
    if pubkey is None:
        return Check("signature", False, "the run is signed; pass --pubkey FILE to check the signature")
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


def _subject_digests(statement: dict, run: RunDir, present: set[str], checks: list[Check]) -> dict[str, str]:
    subjects = statement.get("subject") or []
    names = [s.get("name") for s in subjects if isinstance(s, dict)]
    bad: list[str] = []
    listed: dict[str, str] = {}
    for s in subjects:
        name = s.get("name") if isinstance(s, dict) else None
        want = (s.get("digest") or {}).get("sha256") if isinstance(s, dict) else None
        if not _safe_name(name) or not isinstance(want, str):
            bad.append(f"malformed subject {str(s)[:80]!r}")
            continue
        path = run.path / name
        if name not in present:  # only files the walk found: never a path through a link, never outside
            bad.append(f"{name} is listed but absent")
        elif sha256_file(path) != want:
            bad.append(f"{name} has a different sha256 than signed")
        listed[name] = want
    if len(set(names)) != len(names):
        bad.append("a subject is listed twice")
    checks.append(Check("subject digests", not bad and bool(listed),
                        "; ".join(bad) if bad else f"{len(listed)} files match their signed sha256"))
    unlisted = sorted(present - set(listed))
    checks.append(Check("no unlisted files", not unlisted,
                        f"not in the manifest: {', '.join(unlisted[:10])}" if unlisted
                        else "every file is a subject (hidden names included; only regular files)"))
    return listed


# --- run content -----------------------------------------------------------------------


def _complete(run: RunDir, predicate: dict, aggregate_only: bool) -> list[Check]:
    state = run.state()
    ok = state.get("status") == "complete" and state == predicate.get("state")
    return [Check("run complete", ok, f"state.json status {state.get('status')!r}"
                  + ("" if state == predicate.get("state") else "; differs from the signed state"))]


def _copied_files(run: RunDir, predicate: dict, aggregate_only: bool) -> list[Check]:
    """Files whose content the predicate carries must equal it."""
    problems = []
    recipe_bytes = run.file("recipe.yaml").read_bytes()
    if hashlib.sha256(recipe_bytes).hexdigest() != predicate.get("recipe_sha256"):
        problems.append("recipe.yaml sha256")
    if recipe_json(recipe_bytes) != predicate.get("recipe"):
        problems.append("recipe.yaml content")
    if read_json(run.file("summary.json")) != predicate.get("summary"):
        problems.append("summary.json")
    for key, name in OPTIONAL_FILES.items():
        on_disk = read_json(run.file(name)) if run.file(name).is_file() else None
        signed = predicate.get(key)
        absent_signed = isinstance(signed, dict) and signed.get("available") is False and on_disk is None
        if not absent_signed and on_disk != signed:
            problems.append(name)
    return [Check("signed copies", not problems, "differ from the signed predicate: " + ", ".join(problems)
                  if problems else "recipe, summary and run files equal the signed predicate")]


def check_case_ids(rows: list[Row], repeats: dict[str, int]) -> list[str]:
    """Problems with case ids: each timed pass holds the same ids, each `repeat` times, seq 0..n-1."""
    passes: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.phase in ("measured", "feasibility"):
            passes.setdefault((r.workload, r.backend, r.phase, r.pass_index), []).append(r)
    reference: dict[str, Counter] = {}
    problems = []
    for key in sorted(passes):
        workload, backend, phase, index = key
        group = passes[key]
        where = f"{backend}/{workload} {phase} pass {index}"
        seqs = sorted(r.seq for r in group)
        if seqs != list(range(len(group))):
            problems.append(f"{where}: seq is not 0..{len(group) - 1}")
        counts = Counter(r.id for r in group)
        repeat = repeats.get(workload, 1)
        dupes = sorted(i for i, c in counts.items() if c > repeat)
        short = sorted(i for i, c in counts.items() if c < repeat)
        if dupes:
            problems.append(f"{where}: duplicate case ids {', '.join(dupes[:5])}")
        if short:
            problems.append(f"{where}: case ids seen fewer than {repeat} times {', '.join(short[:5])}")
        ref = reference.setdefault(workload, counts)
        missing = sorted(set(ref) - set(counts))
        extra = sorted(set(counts) - set(ref))
        if missing:
            problems.append(f"{where}: missing case ids {', '.join(missing[:5])}")
        if extra:
            problems.append(f"{where}: case ids absent from other passes {', '.join(extra[:5])}")
    return problems


def check_planned_order(rows: list[Row], planned: dict[str, list[str]] | None) -> list[str]:
    """Each timed pass holds exactly the planned case ids in the planned order (plan.json case_ids)."""
    if not planned:
        return []
    passes: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.phase in ("measured", "feasibility"):
            passes.setdefault((r.workload, r.backend, r.phase, r.pass_index), []).append(r)
    problems = []
    for (workload, backend, phase, index), group in sorted(passes.items()):
        ids = [r.id for r in sorted(group, key=lambda r: r.seq)]
        expected = planned.get(workload)
        if expected is not None and ids != expected:
            missing = sorted(set(expected) - set(ids))
            detail = f"missing {', '.join(missing[:5])}" if missing else "order or count differs"
            problems.append(f"{backend}/{workload} {phase} pass {index}: not the planned requests ({detail})")
    return problems


def _case_ids(run: RunDir, predicate: dict, aggregate_only: bool) -> list[Check]:
    recipe = parse_recipe(run.file("recipe.yaml").read_text(encoding="utf-8"), "recipe.yaml")
    rows = read_rows(run.rows_path)
    problems = check_case_ids(rows, {w.name: w.repeat for w in recipe.workloads})
    plan = read_json(run.file("plan.json")) if run.file("plan.json").is_file() else {}
    problems += check_planned_order(rows, plan.get("case_ids"))
    return [Check("case ids", not problems, "; ".join(problems[:6]) if problems
                  else f"{len(rows)} rows; every timed pass holds the same case ids")]


def _responses(run: RunDir, predicate: dict, aggregate_only: bool) -> list[Check]:
    if aggregate_only:
        return [Check("response bodies", None, "aggregate-only bundle: bodies are omitted (JevBench terms), "
                      "so row body_sha256 values cannot be checked against them")]
    hashes = {(r.backend, r.workload, r.phase, r.pass_index, r.seq): r.body_sha256 for r in read_rows(run.rows_path)}
    wrong, seen = [], 0
    for path in sorted(run.path.glob("responses/*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            entry = json.loads(line)
            if "body" in entry:
                body = entry["body"].encode("utf-8")
            elif "body_base64" in entry:
                body = base64.b64decode(entry["body_base64"])
            else:
                continue
            seen += 1
            key = (entry["backend"], entry["workload"], entry["phase"], entry["pass_index"], entry["seq"])
            if hashes.get(key) != hashlib.sha256(body).hexdigest():
                wrong.append(f"{path.name}:{number}")
    return [Check("response bodies", not wrong, f"bodies whose sha256 differs from their row: {', '.join(wrong[:5])}"
                  if wrong else f"{seen} bodies match their rows' body_sha256")]


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first JSON path where two values differ, with both values; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}: present on one side only"
            diff = first_difference(a[key], b[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            diff = first_difference(x, y, f"{path}[{i}]")
            if diff:
                return diff
        return None
    return None if (a == b and type(a) is type(b)) else f"{path or '(top)'}: {a!r} vs {b!r}"


def _recomputed(run: RunDir, predicate: dict, aggregate_only: bool,
                summarize: Callable[..., dict] | None = None) -> list[Check]:
    if summarize is None:
        from ..results import summarize
    recipe = parse_recipe(run.file("recipe.yaml").read_text(encoding="utf-8"), "recipe.yaml")
    # Round-trip through JSON so recomputed and stored values are compared as written.
    ours = json.loads(json.dumps(summarize(read_rows(run.rows_path), recipe), allow_nan=False))
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
    return checks

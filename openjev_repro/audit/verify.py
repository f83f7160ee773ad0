"""`verify`: check a signed run, a bundle of one, or an imported run, from its bytes alone.

`verify_path` opens a bundle (or takes a directory), `verify_dir` walks the tree (nothing is
opened unless it holds only regular files and directories) and hands the run to what its kind
must show: a signed run's checks (`verify_signed.py`: envelope, signature, digests, copies,
every statistic recomputed) or an imported run's (`verify_imported.py`: the import record, the
converted files, the source re-imported, every published figure recomputed). Both share the
evidence reader and the common checks of `run_checks.py`. `format_checks` prints the verdict:
one line per check, PASS, FAIL or N/A, then VERIFIED or FAILED.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..errors import ReproError, UnsupportedFormat
from ..evidence.rundir import ENVELOPE_NAME, RunDir, scan_tree
from ..manifest.run_manifest import read_statement_record
from .bundle import opened
from .run_checks import BAD_EVIDENCE, Check, Evidence, check_case_ids, check_planned_order, first_difference
from .verify_imported import verify_imported
from .verify_signed import SignedRun

__all__ = [
    "Check",
    "Evidence",
    "check_case_ids",
    "check_planned_order",
    "first_difference",
    "format_checks",
    "verify_dir",
    "verify_imported",
    "verify_path",
]


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
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        return [Check("run entries", False, "only regular files may be in a run or bundle: "
                      + "; ".join(problems[:6]) + more)]
    ev = evidence if evidence is not None else Evidence(RunDir(root))
    if not (root / ENVELOPE_NAME).exists() and (root / "import.json").is_file():
        return verify_imported(ev.run, pubkey=pubkey, evidence=ev, source=source)
    try:
        envelope, statement = read_statement_record(root / ENVELOPE_NAME)
    except BAD_EVIDENCE as exc:
        return [Check("envelope", False, str(exc))]
    return SignedRun(ev, files, envelope, statement, pubkey, allow_unsigned).checks()


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


def _printable(text: str) -> str:
    """One line: newlines and other unprintable characters (from file names, say) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _verdict(failed: int, unsigned: bool) -> str:
    if failed:
        return "FAILED"
    return "VERIFIED, UNSIGNED (nothing proves who wrote it)" if unsigned else "VERIFIED"


_SIGNED = re.compile(r"(?<![A-Za-z])signed(?![A-Za-z])")


def _unsigned_wording(check: Check) -> Check:
    """"signed sha256" -> "recorded sha256" in an UNSIGNED manifest's checks (a bundle's source checks
    are about the run's own manifest, which may well be signed, and keep their words)."""
    if check.unsigned or check.name.startswith("source"):
        return check
    return replace(check, name=_SIGNED.sub("recorded", check.name), detail=_SIGNED.sub("recorded", check.detail))

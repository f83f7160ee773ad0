"""Tasks of the audit area: verify, compare, claims, import-evidence, publish."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import Exit, task

from ..errors import EvidenceError
from ..printable import printable
from . import FAIL_ON_GATES_HELP, exit_on_failed_gates, user_errors
from .output import echo

__all__ = ["claims", "compare", "import_evidence", "publish", "verify"]


def _refuse_what_has_no_manifest(path: Path) -> None:
    """A directory with nothing to verify gets advice that fits it (not always "sign it first")."""
    if not path.is_dir() or any((path / n).exists() for n in ("manifest.dsse.json", "summary.dsse.json", "import.json")):
        return
    state = path / "state.json"
    if not state.is_file():
        raise EvidenceError(f"{path} is no run directory, bundle or collect directory (no manifest.dsse.json or "
                            "summary.dsse.json in it); a submission's are in its replicate-*/ and collect-*/ folders.")
    from ..evidence.records import state_of
    from ..evidence.rundir import RunDir

    status = state_of(RunDir.open(path)).status
    if status == "complete":
        raise EvidenceError(f"{path} is a complete run without a manifest; sign it with "
                            f"`invoke sign --run {path} --key K` (or write an UNSIGNED one without --key).")
    raise EvidenceError(f"{path} is an incomplete run (status {status!r}): it was never signed and never will be; "
                        "nothing to verify.")


def _collection_checks(directory: Path, pubkey: str | None) -> list:
    """A collect directory (`invoke collect`): its signature and every file's digest, no unlisted file."""
    from ..audit.verify import Check
    from ..cluster.collect import verify_summary
    from ..errors import VerificationError

    if not pubkey:
        raise EvidenceError(f"{directory} is a collect directory, always signed: pass --pubkey with the public "
                            "half of the key collect signed with (yours, never one inside the submission).")
    try:
        signed = verify_summary(directory, Path(pubkey))
    except (VerificationError, EvidenceError, ValueError) as exc:
        return [Check("collection signature and digests", False, str(exc).splitlines()[0] if str(exc) else repr(exc))]
    listed = {*signed.files, "summary.dsse.json"}
    extra = sorted(p.name for p in directory.iterdir() if p.name not in listed)
    return [Check("collection signature", True, f"summary.dsse.json signed by keyid {signed.keyid}"),
            Check("subject digests", True, f"{len(listed) - 1} files match their signed sha256"),
            Check("no unlisted files", not extra, "unlisted: " + ", ".join(extra) if extra else
                  "every file is a subject")]


@task(help={"run": "run directory, a bundle file written by `invoke publish`, or a collect directory "
                   "(`invoke collect`'s collect-<time>/)",
            "pubkey": "public key (.pub from `invoke keygen`) the manifest (or collect summary) must be signed by",
            "allow_unsigned": "accept an UNSIGNED manifest and check everything else",
            "source": "an imported run: the folder of the published files, re-hashed against the digests "
                      "checked at import (never the path import.json names)",
            "fail_on_gates": FAIL_ON_GATES_HELP + "; the gates are the signed ones, recomputed"})
@user_errors
def verify(c, run, pubkey=None, allow_unsigned=False, source=None, fail_on_gates=False):
    """Check signature, digests, completeness and every recomputed statistic; non-zero exit on any failure."""
    from ..audit.verify import format_checks

    if not Path(run).exists():
        raise EvidenceError(f"No run directory, bundle or collect directory at {run}.")
    _refuse_what_has_no_manifest(Path(run))
    collection = (Path(run) / "summary.dsse.json").is_file()
    checks = _verify_checks(Path(run), collection, pubkey, allow_unsigned, source)
    echo(format_checks(checks))
    failed = [c for c in checks if c.passed is False]
    if failed:
        raise Exit(f"error: {printable(str(run))} does not verify ({len(failed)} of {len(checks)} checks failed; FAIL lines above).",
                   code=1)
    if fail_on_gates and not collection:
        from ..audit.bundle import opened

        with opened(Path(run)) as directory:
            exit_on_failed_gates(directory / "summary.json", str(run))


def _verify_checks(run: Path, collection: bool, pubkey: str | None, allow_unsigned: bool, source: str | None) -> list:
    """The checks of a run, bundle or collect directory (a collection: its signed summary's checks)."""
    from ..audit.verify import verify_path
    from ..manifest.keys import trusted_public_key

    if pubkey:  # the user's key, never one inside the evidence (or, for a collection, its submission)
        trusted_public_key(Path(pubkey), run, *([run.parent] if collection else []))
    if collection and not (run / "manifest.dsse.json").exists():
        return _collection_checks(run, pubkey)
    return verify_path(run, pubkey=_path_or_none(pubkey), allow_unsigned=allow_unsigned, source=_path_or_none(source))


def _path_or_none(option: str | None) -> Path | None:
    return Path(option) if option else None


@task(help={"baseline": "baseline run directory (or bundle)", "candidate": "candidate run directory (or bundle)",
            "tolerances": "YAML of declared tolerances and an optional backend mapping",
            "out": "write the JSON result here, e.g. cmp.json (cmp.md beside it gets the Markdown)",
            "seed": "bootstrap seed (default 20261003)",
            "allow_incomplete": "compare a run that is not complete (the verdict then says so)"})
@user_errors
def compare(c, baseline, candidate, tolerances=None, out=None, seed=20261003, allow_incomplete=False):
    """Compare two runs backend by backend, with a verdict; exit 1 on any failure.

    A failure is a declared limit exceeded, a backend without a counterpart, a measured request
    that failed, or recipes that differ in what was measured (with or without --tolerances)."""
    from ..audit.compare import compare_runs, load_tolerances, to_markdown

    if out:
        _guard_outputs(Path(out))
    tol = load_tolerances(Path(tolerances)) if tolerances else None
    result = compare_runs(Path(baseline), Path(candidate), tolerances=tol, seed=int(seed),
                          allow_incomplete=allow_incomplete)
    markdown = to_markdown(result)
    if out:
        Path(out).write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
        Path(out).with_suffix(".md").write_text(markdown)
    from .output import print_markdown

    print_markdown(markdown)  # rendered on a terminal, as `invoke report` does; verbatim through a pipe
    if result.verdict.passed is False:
        raise Exit(code=1)


def _guard_outputs(out: Path) -> None:
    """compare writes the JSON to --out and the Markdown beside it: neither may overwrite the other, or evidence."""
    from ..evidence.rundir import guard_output

    if out.suffix == ".md":
        raise EvidenceError(f"--out {out} would be overwritten by the Markdown written beside it; "
                            "--out names the JSON result (e.g. cmp.json, with cmp.md beside it).")
    guard_output(out)
    guard_output(out.with_suffix(".md"))


@task(help={"file": "claims file, e.g. manifests/published/open-jev-h200-hf-comparison-2026-10-03.yaml"})
@user_errors
def claims(c, file):
    """Recompute every derived figure of a published report from its base figures; non-zero exit on a mismatch."""
    from ..audit.claims import check_claims, load_claims

    loaded = load_claims(Path(file))
    what = " · ".join(printable(part) for part in (loaded.report, loaded.experiment) if part) or "a report"
    header = f"claims of {what} ({file}):"  # which report's figures are checked
    results = check_claims(loaded)
    _print_claims(header, results)
    if any(r.failed for r in results):
        raise Exit(code=1)


def _print_claims(header: str, results: list) -> None:
    """A table at the terminal's width (words whole, nothing cut); through a pipe, one line per claim."""
    from rich.table import Table
    from rich.text import Text

    from ..audit.claims import format_results, summary_line
    from .output import console

    out = console()
    if not out.is_terminal:
        print(header)
        print(format_results(results))
        return
    mark = len("FINDING")
    stated, recomputed = (max(len(title), *map(len, cells)) for title, cells in (
        ("stated", [r.stated for r in results]), ("recomputed", [r.recomputed for r in results])))
    room = out.width - mark - stated - recomputed - 4  # the claim and the derivation share the rest, 1 space apart
    claim = max(8, min(max(len(r.name) for r in results), room - 19))  # whole when there is room (else it folds)
    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, pad_edge=False)
    table.add_column("", no_wrap=True, width=mark)
    table.add_column("claim", overflow="fold", width=claim)
    table.add_column("stated", justify="right", no_wrap=True, width=stated)
    table.add_column("recomputed", justify="right", no_wrap=True, width=recomputed)
    table.add_column("derivation", width=max(18, room - claim))  # then why it does not reproduce, and the finding
    for r in results:
        table.add_row(*(Text(cell) for cell in (r.mark, r.name, r.stated, r.recomputed, r.reading)))
    out.print(Text(header))
    out.print(table)
    out.print(Text(summary_line(results)))


@task(name="import-evidence",
      help={"format": "source layout: auto (detected), system1-omni, provenance-json, timings-csv or sha256sums", "src": "folder of the published evidence: the one holding "
            "their manifest.json, or a subfolder of it (manifest.json is looked for up to three folders above)",
            "subdir": "evidence subfolder under the manifest's folder, e.g. e2e (default: --src when it is a "
            "subfolder, else the one folder holding <arm>-measured-<pass>.jsonl files)",
            "out": "new run directory to create", "workload": "workload name for the imported rows (default mixed)"})
@user_errors
def import_evidence(c, src, out, format="auto", workload="mixed", subdir=None):
    """Verify another harness's published per-request evidence and convert it into an (unsigned, imported) run;
    exit 3 (NOT REPRODUCED, nothing written) when a published figure does not reproduce from the published rows."""
    from ..audit.figures import NotReproduced
    from ..audit.importer import FORMATS, format_import_report, import_evidence

    if format != "auto" and format not in FORMATS:
        raise Exit(f"error: unknown --format {format!r}; supported: auto, {', '.join(FORMATS)}", code=1)
    try:
        report = import_evidence(Path(src), Path(out), fmt=format, workload=workload, subdir=subdir)
    except NotReproduced as exc:
        echo("\n".join(exc.lines()))
        raise Exit(f"error: {printable(src)}: NOT REPRODUCED: {len(exc.mismatched)} of {len(exc.figures)} published figures "
                   f"do not reproduce from the published rows; no run was written.", code=3) from None
    echo(format_import_report(report))


@task(help={"run": "signed, complete run directory", "out": "bundle file to write; its name ends in .tar.gz",
            "key": "private key (from `invoke keygen`) to sign the bundle; without it the bundle is UNSIGNED",
            "pubkey": "public key the run's manifest is signed by (default: the public half of --key); a signed "
                      "run is published only when its signature verifies",
            "include_bodies": "keep responses/ and logs/: a PRIVATE archive, not publishable under the JevBench "
                              "terms (without it the bundle is aggregate-only)",
            "aggregate_only": "no bodies, which is already the default: says so explicitly in a script "
                              "(refused together with --include-bodies)"})
@user_errors
def publish(c, run, out, key=None, pubkey=None, include_bodies=False, aggregate_only=False):
    """Write a bundle (.tar.gz) of hashes, rows and aggregates, no request or response bodies; signed with --key."""
    from ..audit.publish import publish as write_bundle

    if aggregate_only and include_bodies:
        raise EvidenceError("--aggregate-only and --include-bodies contradict each other; give one.")
    aggregate = not include_bodies
    path = write_bundle(Path(run), Path(out), aggregate_only=aggregate, key_path=Path(key) if key else None,
                        pubkey=Path(pubkey) if pubkey else None)
    kind = "aggregate-only" if aggregate else "PRIVATE (with bodies)"
    if key:
        print(f"signed {kind} bundle: {path}")
    else:
        print(f"UNSIGNED {kind} bundle: {path} (check it with `invoke verify --run {path} --allow-unsigned`; "
              "pass --key to sign)")

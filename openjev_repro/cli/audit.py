"""Tasks of the audit area: verify, compare, claims, import-evidence, publish."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import Exit, task

from ..errors import EvidenceError
from . import user_errors

__all__ = ["claims", "compare", "import_evidence", "publish", "verify"]


@task(help={"run": "run directory, or a bundle file written by `invoke publish`",
            "pubkey": "public key (.pub from `invoke keygen`) the manifest must be signed by",
            "allow_unsigned": "accept an UNSIGNED manifest and check everything else"})
@user_errors
def verify(c, run, pubkey=None, allow_unsigned=False):
    """Check signature, digests, completeness and every recomputed statistic; non-zero exit on any failure."""
    from ..audit.verify import format_checks, verify_path

    if not Path(run).exists():
        raise EvidenceError(f"No run directory or bundle at {run}.")
    checks = verify_path(Path(run), pubkey=Path(pubkey) if pubkey else None, allow_unsigned=allow_unsigned)
    print(format_checks(checks))
    failed = [c for c in checks if c.passed is False]
    if failed:
        raise Exit(f"error: {run} does not verify ({len(failed)} of {len(checks)} checks failed; FAIL lines above).",
                   code=1)


@task(help={"baseline": "baseline run directory (or bundle)", "candidate": "candidate run directory (or bundle)",
            "tolerances": "YAML of declared tolerances and an optional backend mapping",
            "out": "write the JSON result here (a .md beside it gets the Markdown table)",
            "seed": "bootstrap seed (default 20261003)",
            "allow_incomplete": "compare a run that is not complete (the verdict then says so)"})
@user_errors
def compare(c, baseline, candidate, tolerances=None, out=None, seed=20261003, allow_incomplete=False):
    """Compare two runs backend by backend; non-zero exit when a declared tolerance is exceeded."""
    from ..audit.compare import compare_runs, load_tolerances, to_markdown
    from ..evidence.rundir import guard_output

    if out:
        guard_output(Path(out))
        guard_output(Path(out).with_suffix(".md"))
    tol = load_tolerances(Path(tolerances)) if tolerances else None
    result = compare_runs(Path(baseline), Path(candidate), tolerances=tol, seed=int(seed),
                          allow_incomplete=allow_incomplete)
    markdown = to_markdown(result)
    if out:
        Path(out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        Path(out).with_suffix(".md").write_text(markdown)
    print(markdown)
    if result["verdict"]["passed"] is False:
        raise Exit(code=1)


@task(help={"file": "claims file, e.g. manifests/published/open-jev-h200-hf-comparison-2026-10-03.yaml"})
@user_errors
def claims(c, file):
    """Recompute every derived figure of a published report from its base figures; non-zero exit on a mismatch."""
    from ..audit.claims import check_claims, format_results, load_claims

    results = check_claims(load_claims(Path(file)))
    print(format_results(results))
    if any(r.failed for r in results):
        raise Exit(code=1)


@task(name="import-evidence",
      help={"format": "source format; only system1-omni", "src": "folder of the published evidence: the one holding "
            "their manifest.json, or a subfolder of it (manifest.json is looked for up to three folders above)",
            "subdir": "evidence subfolder under the manifest's folder, e.g. e2e (default: --src when it is a "
            "subfolder, else the one folder holding <arm>-measured-<pass>.jsonl files)",
            "out": "new run directory to create", "workload": "workload name for the imported rows (default mixed)"})
@user_errors
def import_evidence(c, src, out, format="system1-omni", workload="mixed", subdir=None):
    """Verify another harness's published per-request evidence and convert it into an (unsigned, imported) run."""
    from ..audit.importer import format_import_report, import_system1

    if format != "system1-omni":
        raise Exit(f"error: unknown --format {format!r}; supported: system1-omni", code=1)
    report = import_system1(Path(src), Path(out), workload=workload, subdir=subdir)
    print(format_import_report(report))


@task(help={"run": "signed, complete run directory", "out": "bundle file to write; its name ends in .tar.gz",
            "key": "private key (from `invoke keygen`) to sign the bundle; without it the bundle is UNSIGNED",
            "include_bodies": "keep responses/ and logs/: a PRIVATE archive, not publishable under the JevBench terms",
            "aggregate_only": "no bodies: the default (--no-aggregate-only is --include-bodies)"})
@user_errors
def publish(c, run, out, key=None, include_bodies=False, aggregate_only=True):
    """Write a bundle (.tar.gz) of hashes, rows and aggregates, no request or response bodies; signed with --key."""
    from ..audit.publish import publish as write_bundle

    aggregate = aggregate_only and not include_bodies
    path = write_bundle(Path(run), Path(out), aggregate_only=aggregate, key_path=Path(key) if key else None)
    kind = "aggregate-only" if aggregate else "PRIVATE (with bodies)"
    if key:
        print(f"signed {kind} bundle: {path}")
    else:
        print(f"UNSIGNED {kind} bundle: {path} (check it with `invoke verify --run {path} --allow-unsigned`; "
              "pass --key to sign)")

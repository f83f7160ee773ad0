"""The task of issue 38: `invoke reproduce`, a verdict on a rerun of a signed study (docs/reproduce.md)."""

from __future__ import annotations

from pathlib import Path

from invoke import Exit, task

from ..errors import EvidenceError
from . import user_errors

__all__ = ["reproduce"]


@task(help={"original": "the original run: a signed run directory, a bundle, or an imported published run",
            "rerun": "the rerun: a run directory or bundle",
            "pubkey": "public key the rerun is signed by (yours, never one inside the evidence)",
            "original_pubkey": "public key the original is signed by (default: --pubkey)",
            "key": "private key to sign verdict.dsse.json with (without it: UNSIGNED)",
            "out": "new folder for verdict.md and verdict.dsse.json",
            "seed": "bootstrap seed (default 20261204; the output is the same for the same seed)"})
@user_errors
def reproduce(c, original, rerun, pubkey, original_pubkey=None, key=None, out=None, seed=20261204):
    """Verdict on a rerun: REPRODUCED (exit 0), NOT REPRODUCED (3), NOT COMPARABLE (4) or INCONCLUSIVE (5),
    by the margins the original declared; 1 for a user error or a run that does not verify."""
    from ..audit.reproduce import judge, opened_runs
    from ..audit.reproduce_report import verdict_lines, wrapped, write_outputs
    from ..evidence.rundir import guard_output
    from ..manifest.keys import load_private_key

    original_key = original_pubkey or pubkey
    if key:
        load_private_key(Path(key))  # a bad key is refused before any work
    if out:
        if Path(out).exists():
            raise EvidenceError(f"--out {out} already exists; name a new folder (a verdict never replaces one).")
        guard_output(Path(out))
    option = "--original-pubkey" if original_pubkey else "--pubkey"
    with opened_runs(Path(original), Path(rerun), Path(pubkey), Path(original_key), option) as (a, b):
        verdict = judge(a, b, original_pubkey=Path(original_key), seed=int(seed))
        print("\n".join(verdict_lines(verdict)))
        if out:
            markdown, envelope = write_outputs(verdict, Path(out), Path(key) if key else None)
            print(wrapped(f"wrote {markdown} and {envelope} ({'signed' if key else 'UNSIGNED'})"))
    if verdict.kind.exit_code:
        raise Exit(code=verdict.kind.exit_code)

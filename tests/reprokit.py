"""Helpers of the reproduction tests (issue 38; no tests here)."""

from __future__ import annotations

from pathlib import Path

from openjev_repro.evidence.rundir import RunDir
from openjev_repro.manifest.dsse import envelope_bytes, make_envelope
from openjev_repro.manifest.keys import load_private_key
from openjev_repro.manifest.run_manifest import build_statement


def resign(run: Path, key: Path) -> None:
    """A new manifest over the run as it is now, signed with `key` (what a holder of the key can always do)."""
    statement = build_statement(RunDir(run), signed=True)
    (run / "manifest.dsse.json").write_bytes(envelope_bytes(make_envelope(statement.payload(), load_private_key(key))))

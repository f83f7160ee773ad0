"""The report's kernel-cache section: what kernel_caches.json says of each backend's Triton and Inductor
caches (issue 39): pinned to which archive, their tree digest when the backend started and when it stopped,
and whether they stayed unchanged (a changed pinned cache names the files that moved)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..evidence.rundir import RunDir
from ..printable import printable
from ..study.kernel_caches import CacheRecord, KernelCachesRecord

__all__ = ["kernel_cache_lines"]


def _outcome(cache: CacheRecord) -> str:
    if cache.changed is None:
        return "not digested after (the backend did not stop cleanly)"
    if not cache.changed:
        return "unchanged"
    which = "" if isinstance(cache.changes, msgspec.UnsetType) else f": {printable(cache.changes.phrase())}"
    return f"**CHANGED**{which}"


def kernel_cache_lines(run_path: Path) -> list[str]:
    """The section's lines; none for a run whose backends declared no kernel caches."""
    record = KernelCachesRecord.read(RunDir(run_path))
    if record is None or not record.backends:
        return []
    lines = [("Each cache a fresh folder beside the run (`kernel_caches.json`), filled from the recipe's pinned "
              "archive when there is one; its tree digest (sha256 over its files' `sha256sum` lines) when the backend "
              "started and after it stopped."), "",
             "| Backend | Cache | Pinned archive | Files before / after | Digest before | Digest after | Outcome |",
             "| --- | --- | --- | ---: | --- | --- | --- |"]
    for backend, caches in record.backends.items():
        for c in caches:
            archive = "fresh, not pinned" if isinstance(c.archive, msgspec.UnsetType) else \
                f"`{Path(c.archive).name}` (`{str(c.archive_sha256)[:12]}…`)"
            after = c.after if not isinstance(c.after, msgspec.UnsetType) else None
            lines.append(f"| {printable(backend)} | {c.kind} | {archive} | {c.before.files} / "
                         f"{after.files if after else '-'} | `{c.before.sha256[:12]}…` | "
                         f"{f'`{after.sha256[:12]}…`' if after else '-'} | {_outcome(c)} |")
    pinned = [c for caches in record.backends.values() for c in caches if c.pinned]
    if pinned and all(c.changed is False for c in pinned):
        lines += ["", (f"Every pinned cache ({len(pinned)}) was unchanged after its backend stopped: no kernel was "
                       "compiled or autotuned anew in this run.")]
    return lines

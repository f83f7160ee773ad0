"""verify's check of what actually ran (issue 39): every backend's recorded runtime identity
(backends.json `runtime_identity`, evidence/identity.py) and the run's kernel_caches.json are
well-formed, by their own record types. A run that records neither (older runs, foreign servers
only) gets no check, so its verdict and check count are what they were."""

from __future__ import annotations

from typing import Any

from ..errors import EvidenceError
from ..evidence.identity import RuntimeIdentity
from ..evidence.records import backends_of
from ..evidence.rundir import RunDir
from ..study.kernel_caches import KernelCachesRecord

__all__ = ["runtime_identity_verdict"]


def _reported(entry: Any) -> Any:
    """The entry's runtime_identity; None where the backend reported none ({"available": false, ...})."""
    value = entry.get("runtime_identity") if isinstance(entry, dict) else None
    return None if isinstance(value, dict) and value.get("available") is False else value


def _identity_phrase(name: str, value: Any) -> tuple[bool, str]:
    """(well-formed, what it holds or what is wrong) of one backend's recorded identity."""
    try:
        identity = RuntimeIdentity.decode(value)
    except ValueError as exc:
        return False, f"{name}: backends.json runtime_identity: {exc}"
    pending = f" ({identity.pending} not hashed)" if identity.pending else ""
    return True, f"{name} {len(identity.libraries)} shared objects{pending}"


def _caches_phrase(run: RunDir) -> list[tuple[bool, str]]:
    try:
        caches = KernelCachesRecord.read(run)
    except EvidenceError as exc:
        return [(False, str(exc))]
    return [] if caches is None else [(True, f"kernel caches of {len(caches.backends)} backends")]


def runtime_identity_verdict(run: RunDir) -> tuple[bool, str] | None:
    """(passed, detail) of the "runtime identity" check; None when the run records nothing to check."""
    reported = {name: value for name, entry in backends_of(run).entries.items()
                if (value := _reported(entry)) is not None}
    phrases = [_identity_phrase(name, value) for name, value in sorted(reported.items())] + _caches_phrase(run)
    if not phrases:
        return None
    problems = [text for ok, text in phrases if not ok]
    return (False, "; ".join(problems)) if problems else (True, "well-formed: " + ", ".join(t for _, t in phrases))

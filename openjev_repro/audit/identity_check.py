"""verify's check of what actually ran (issue 39): every backend's recorded runtime identity
(backends.json `runtime_identity`, evidence/identity.py) and the run's kernel_caches.json are
well-formed, by their own record types. A run that records neither (older runs, foreign servers
only) gets no check, so its verdict and check count are what they were."""

from __future__ import annotations

from ..errors import EvidenceError
from ..evidence.identity import RuntimeIdentity
from ..evidence.records import backends_of
from ..evidence.rundir import RunDir
from ..study.kernel_caches import KernelCachesRecord

__all__ = ["runtime_identity_verdict"]


def _identity_phrases(run: RunDir) -> list[tuple[bool, str]]:
    """(well-formed, what it holds or what is wrong) of every backend's recorded identity; a backend
    that reported none ({"available": false, ...}) or a run from before issue 39 has no phrase."""
    try:
        facts = backends_of(run).backends
    except EvidenceError as exc:  # a malformed runtime_identity fails the decode of backends.json
        return [(False, str(exc))]
    phrases = []
    for name, fact in sorted(facts.items()):
        identity = fact.runtime_identity
        if isinstance(identity, RuntimeIdentity):
            pending = f" ({identity.pending} not hashed)" if identity.pending else ""
            phrases.append((True, f"{name} {len(identity.libraries)} shared objects{pending}"))
    return phrases


def _caches_phrase(run: RunDir) -> list[tuple[bool, str]]:
    try:
        caches = KernelCachesRecord.read(run)
    except EvidenceError as exc:
        return [(False, str(exc))]
    return [] if caches is None else [(True, f"kernel caches of {len(caches.backends)} backends")]


def runtime_identity_verdict(run: RunDir) -> tuple[bool, str] | None:
    """(passed, detail) of the "runtime identity" check; None when the run records nothing to check."""
    phrases = _identity_phrases(run) + _caches_phrase(run)
    if not phrases:
        return None
    problems = [text for ok, text in phrases if not ok]
    return (False, "; ".join(problems)) if problems else (True, "well-formed: " + ", ".join(t for _, t in phrases))

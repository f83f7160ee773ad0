"""verify's check of what actually ran (issue 39): every backend's recorded runtime identity
(backends.json `runtime_identity`, evidence/identity.py) and the run's kernel_caches.json are
well-formed, by their own record types. A run that records neither (older runs, foreign servers
only) gets no check, so its verdict and check count are what they were."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import EvidenceError
from ..evidence.identity import RuntimeIdentity
from ..evidence.records import backends_of
from ..study.kernel_caches import KernelCachesRecord

if TYPE_CHECKING:
    from .verify import Check, Evidence

__all__ = ["runtime_identity"]


def _reported(entry: Any) -> Any:
    """The entry's runtime_identity; None where the backend reported none ({"available": false, ...})."""
    value = entry.get("runtime_identity") if isinstance(entry, dict) else None
    return None if value is None or (isinstance(value, dict) and value.get("available") is False) else value


def runtime_identity(ev: Evidence, predicate: dict, aggregate_only: bool) -> list[Check]:
    """One check, "runtime identity", when the run records any; none otherwise."""
    from .verify import Check

    del predicate, aggregate_only
    reported = {name: value for name, entry in backends_of(ev.run).entries.items()
                if (value := _reported(entry)) is not None}
    problems, facts = [], []
    for name, value in sorted(reported.items()):
        try:
            identity = RuntimeIdentity.decode(value)
        except ValueError as exc:
            problems.append(f"{name}: backends.json runtime_identity: {exc}")
            continue
        facts.append(f"{name} {len(identity.libraries)} shared objects"
                     + (f" ({identity.pending} not hashed)" if identity.pending else ""))
    try:
        caches = KernelCachesRecord.read(ev.run)
    except EvidenceError as exc:
        caches, problems = None, [*problems, str(exc)]
    if caches is not None:
        facts.append(f"kernel caches of {len(caches.backends)} backends")
    if not reported and caches is None and not problems:
        return []
    return [Check("runtime identity", not problems, "; ".join(problems) if problems else
                  "well-formed: " + ", ".join(facts))]

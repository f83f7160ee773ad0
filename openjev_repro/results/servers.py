"""The report's lines about how each backend was reached: launched or given by URL, readiness, connections.

From a run's servers.json record (runs from 2026-12 on; older runs have none and get no lines, so their
signed reports render unchanged) and backends.json's (whether the server reported our identity).
"""

from __future__ import annotations

from ..evidence.records import BackendsRecord, Connections, ServerEntry, ServersRecord

__all__ = ["server_lines"]

_READY_WORDS = {
    "status-ready": "GET {health} answered {answer} with status \"ready\"",
    "any-2xx": "GET {health} answered {answer}",
    "first-inference": "the first-inference request (POST {endpoint}) answered {answer}",
}


def _reach(info: ServerEntry) -> str:
    if info.launched is False:
        url = " ".join(str(info.url).split())  # one line, whatever the file holds
        return f"a server running already at {url}, reached but not launched, stopped or owned by the study"
    return "launched and stopped by the study"


def _ready(info: ServerEntry) -> str:
    ready = info.readiness
    if ready is None:
        return f"readiness {info.readiness_kind} (not reached)"
    words = _READY_WORDS.get(ready.kind, "{answer}").format(health=info.health, endpoint=info.endpoint,
                                                           answer=ready.answer)
    return f"ready when {words} ({ready.kind}, {ready.seconds} s)"


def _connections(conn: Connections | None) -> str:
    if conn is None:
        return "connections not recorded"
    opened, requests = conn.connections_opened, conn.requests
    versions = "/".join(f"HTTP/{v}" for v in conn.http_versions) or "no response"
    if opened == 1 and not conn.closed_by_server:
        return f"1 connection for {requests} requests, kept open ({versions})"
    if opened and not conn.closed_by_server:  # several client connections (load levels), none closed
        return f"{opened} connections for {requests} requests, each kept open ({versions})"
    return (f"{opened} connections for {requests} requests: the server closed {conn.closed_by_server} "
            f"({versions}), so {conn.reconnected_requests} requests were sent on a new connection")


def _identity(name: str, backends: BackendsRecord) -> str:
    facts = backends.backends.get(name)
    if facts is not None and facts.weights_fingerprint is not None:
        return "its /health reports our identity (weights fingerprint)"
    return "a foreign server: no weights fingerprint in its health answer, its answers taken as it gives them"


def _ordered(found: dict[str, ServerEntry], order: list[str] | None) -> dict[str, ServerEntry]:
    names = [n for n in order or [] if n in found] + sorted(n for n in found if n not in (order or []))
    return {name: found[name] for name in names}


def _boundary(entries: dict[str, ServerEntry]) -> str:
    renewed = [name for name, info in entries.items()
               if info.connections is not None and info.connections.reconnected_requests > 0]
    line = "Timing boundary: no TCP connect is inside any latency (the client connects before a request's clock starts)."
    several = any(info.connections is not None and info.connections.connections_opened != 1 for info in entries.values())
    if not renewed and several:
        return line + (" No server closed a connection: every request went out on a connection already open "
                       "(load levels open theirs before their first pass).")
    if not renewed:
        return line + " Every backend served all its requests over one persistent connection."
    return line + (f" {', '.join(renewed)}: the server closed its connections, so those requests did not share "
                   "one persistent connection; each went out on a freshly connected socket, and the server's "
                   "accepting of that connection may overlap the timed window.")


def server_lines(servers: ServersRecord | None, backends: BackendsRecord, order: list[str] | None = None) -> list[str]:
    """One line per backend (in `order`, the recipe's, when given), then what the timing boundary included;
    [] for a run without servers.json."""
    entries = _ordered(servers.backends if servers is not None else {}, order)
    if not entries:
        return []
    lines = [f"- {name}: {_reach(info)}; {_ready(info)}; {_connections(info.connections)}; "
             f"{_identity(name, backends)}." for name, info in entries.items()]
    return [*lines, "", _boundary(entries)]

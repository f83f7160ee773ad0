"""The report's lines about how each backend was reached: launched or given by URL, readiness, connections.

From a run's servers.json (runs from 2026-12 on; older runs have none and get no lines, so their
signed reports render unchanged) and backends.json (whether the server reported our identity).
"""

from __future__ import annotations

from typing import Any

__all__ = ["server_lines"]


def _dict(value: Any) -> dict[str, Any]:
    """A mapping read from a run file, or {} for any other shape (the file is evidence from outside)."""
    return value if isinstance(value, dict) else {}

_READY_WORDS = {
    "status-ready": "GET {health} answered {answer} with status \"ready\"",
    "any-2xx": "GET {health} answered {answer}",
    "first-inference": "the first-inference request (POST {endpoint}) answered {answer}",
}


def _reach(info: dict[str, Any]) -> str:
    if info.get("launched") is False:
        url = " ".join(str(info.get("url")).split())  # one line, whatever the file holds
        return f"a server running already at {url}, reached but not launched, stopped or owned by the study"
    return "launched and stopped by the study"


def _ready(info: dict[str, Any]) -> str:
    ready = _dict(info.get("readiness"))
    kind = ready.get("kind") or info.get("readiness_kind")
    if not ready:
        return f"readiness {kind} (not reached)"
    words = _READY_WORDS.get(str(kind), "{answer}").format(health=info.get("health"), endpoint=info.get("endpoint"),
                                                          answer=ready.get("answer"))
    return f"ready when {words} ({kind}, {ready.get('seconds')} s)"


def _connections(info: dict[str, Any]) -> str:
    conn = _dict(info.get("connections"))
    if not conn:
        return "connections not recorded"
    opened, requests = conn.get("connections_opened"), conn.get("requests")
    found = conn.get("http_versions")
    versions = "/".join(f"HTTP/{v}" for v in (found if isinstance(found, list) else [])) or "no response"
    if opened == 1 and not conn.get("closed_by_server"):
        return f"1 connection for {requests} requests, kept open ({versions})"
    if opened and not conn.get("closed_by_server"):  # several client connections (load levels), none closed
        return f"{opened} connections for {requests} requests, each kept open ({versions})"
    return (f"{opened} connections for {requests} requests: the server closed {conn.get('closed_by_server')} "
            f"({versions}), so {conn.get('reconnected_requests')} requests were sent on a new connection")


def _identity(name: str, backends: dict[str, Any]) -> str:
    info = _dict(_dict(backends.get("backends")).get(name))
    if isinstance(info.get("weights_fingerprint"), str):
        return "its /health reports our identity (weights fingerprint)"
    return "a foreign server: no weights fingerprint in its health answer, its answers taken as it gives them"


def _ordered(found: dict[str, Any], order: list[str] | None) -> dict[str, dict[str, Any]]:
    names = [n for n in order or [] if n in found] + sorted(n for n in found if n not in (order or []))
    return {name: found[name] for name in names if isinstance(found[name], dict)}


def _boundary(entries: dict[str, dict[str, Any]]) -> str:
    renewed = [name for name, info in entries.items()
               if isinstance(n := _dict(info.get("connections")).get("reconnected_requests"), int) and n > 0]
    line = "Timing boundary: no TCP connect is inside any latency (the client connects before a request's clock starts)."
    if not renewed and any(_dict(info.get("connections")).get("connections_opened", 1) != 1 for info in entries.values()):
        return line + (" No server closed a connection: every request went out on a connection already open "
                       "(load levels open theirs before their first pass).")
    if not renewed:
        return line + " Every backend served all its requests over one persistent connection."
    return line + (f" {', '.join(renewed)}: the server closed its connections, so those requests did not share "
                   "one persistent connection; each went out on a freshly connected socket, and the server's "
                   "accepting of that connection may overlap the timed window.")


def server_lines(servers: dict[str, Any], backends: dict[str, Any], order: list[str] | None = None) -> list[str]:
    """One line per backend (in `order`, the recipe's, when given), then what the timing boundary included;
    [] for a run without servers.json."""
    entries = _ordered(_dict(_dict(servers).get("backends")), order)
    if not entries:
        return []
    lines = [f"- {name}: {_reach(info)}; {_ready(info)}; {_connections(info)}; {_identity(name, backends)}."
             for name, info in entries.items()]
    return [*lines, "", _boundary(entries)]

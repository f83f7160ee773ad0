"""When a backend is ready, as its recipe declares it, and what a refused first inference means.

Three kinds (`Backend.readiness`), each polled until `protocol.ready_timeout_s`:

    status-ready     GET the health path; 200 with a JSON object whose "status" is "ready"
                     (our /health contract, and upstream Open-Jev's)
    any-2xx          GET the health path; any 2xx status, whatever the body (e.g. {"status": "ok"})
    first-inference  POST the first-inference request to the endpoint; any 2xx (a server with no
                     health route). A 4xx answer means the server is up and refuses the request:
                     that fails at once, naming the recipe field that likely fixes it.

`Readiness` is what the runner records in servers.json: the kind, the URL polled, the answer
that made it ready, the attempts and the seconds it took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import h11

from ..errors import BackendCrashed, BackendNotReady
from .bounded_http import request_within

__all__ = ["Readiness", "first_inference_hint", "poll_ready"]

_BODY_CHARS = 300  # of an answer quoted in an error message


class _Polled(Protocol):
    def alive(self) -> bool: ...

    def describe_exit(self) -> str: ...


@dataclass
class Readiness:
    kind: str
    url: str
    answer: str  # e.g. "HTTP 200"
    attempts: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_inference_hint(status: int | None, body: bytes | str, *, model: str, endpoint: str) -> str:
    """The recipe field most likely to fix a first inference the server refused ('' when unclear)."""
    text = (body.decode("utf-8", "replace") if isinstance(body, bytes) else body).lower()
    if status in (404, 405):
        return (f"the server has no POST {endpoint}: set the backend's `endpoint:` in the recipe to the path "
                "it serves /v1/systemone requests on")
    if status is not None and 400 <= status < 500 and "model" in text:
        return (f"the server does not accept the model name {model!r}: set the backend's `model:` in the recipe "
                "to a name it serves (its GET /v1/models lists them)")
    if status == 415:
        return "the server refuses the JSON content type; it is not a /v1/systemone server"
    if status is None and "lacks answers" in text:
        return (f"the answer is not a /v1/systemone noul answer: check the backend's `endpoint:` ({endpoint}) "
                "and that the server implements the contract")
    return ""


def _fetch(url: str, data: bytes | None, seconds: float,
           headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes]:
    """One GET (or POST of `data`) ended by `seconds` on the wall clock, however slowly the answer trickles."""
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"no host in {url!r}")
    return request_within(parts.hostname, parts.port or 80, parts.path or "/", max(seconds, 1e-3), body=data,
                          headers=headers)


def _judged(kind: str, status: int, body: bytes) -> tuple[bool, dict]:
    """(ready, the JSON object answered, {} when none): `status-ready` wants HTTP 200 with JSON status
    "ready", `any-2xx` (and `first-inference`) any 2xx."""
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        parsed = None
    health = parsed if isinstance(parsed, dict) else {}
    if kind == "status-ready":
        return status == 200 and health.get("status") == "ready", health
    return 200 <= status < 300, health


@dataclass
class _Target:
    """What one readiness poll sends and how its answer is judged."""

    name: str
    kind: str
    url: str
    data: bytes | None
    model: str
    endpoint: str
    log_hint: str
    headers: tuple[tuple[str, str], ...] = ()  # a url backend's, from the environment

    def refusal(self, status: int, body: bytes) -> str | None:
        """For first-inference: a 4xx (not 408/425/429) is a refusal to report now, not a server still loading."""
        if self.kind != "first-inference" or not 400 <= status < 500 or status in (408, 425, 429):
            return None
        hint = first_inference_hint(status, body, model=self.model, endpoint=self.endpoint)
        quoted = body[:_BODY_CHARS].decode("utf-8", "replace")
        return f"answered HTTP {status} ({quoted}){'; ' + hint if hint else ''}"

    def attempt(self, seconds: float) -> tuple[bool, dict, str]:
        """(ready, health body, last answer in words) of one poll ended within `seconds`;
        raises BackendNotReady on a refused first inference."""
        try:
            status, body = _fetch(self.url, self.data, seconds, self.headers)
        except (OSError, ValueError, h11.ProtocolError) as exc:
            return False, {}, str(exc)
        refused = self.refusal(status, body)
        if refused:
            raise BackendNotReady(f"Backend {self.name}: the first-inference request to {self.url} (readiness "
                                  f"first-inference) {refused}. {self.log_hint}")
        ready, parsed = _judged(self.kind, status, body)
        words = f"HTTP {status}" if ready else f"HTTP {status} {body[:_BODY_CHARS].decode('utf-8', 'replace')}"
        return ready, {} if self.kind == "first-inference" else parsed, words


def poll_ready(backend: _Polled, *, name: str, kind: str, base_url: str, health: str, endpoint: str,
               model: str, probe: bytes | None, timeout_s: float, log_hint: str,
               poll_s: float = 0.2, headers: Mapping[str, str] | None = None) -> tuple[dict, Readiness]:
    """Poll until ready; return (the health body as a dict, {} when there is none, and the Readiness)."""
    first = kind == "first-inference"
    target = _Target(name, kind, base_url + (endpoint if first else health), (probe or b"{}") if first else None,
                     model, endpoint, log_hint, tuple((headers or {}).items()))
    started = time.monotonic()
    deadline = started + timeout_s  # one wall-clock deadline for the whole wait, polls included
    last, attempts = "no answer yet", 0
    while time.monotonic() < deadline:
        if not backend.alive():
            raise BackendCrashed(f"Backend {name} exited before it was ready. {backend.describe_exit()}")
        attempts += 1
        per_poll = min(2.0 if not first else 60.0, deadline - time.monotonic())
        ready, health_body, last = target.attempt(per_poll)
        if ready:
            return health_body, Readiness(kind, target.url, last, attempts, round(time.monotonic() - started, 3))
        time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))
    raise BackendNotReady(
        f"Backend {name} was not ready within {timeout_s:.0f} s at {target.url} (readiness {kind}; last answer: "
        f"{last}). {_kind_hint(kind, last)}{log_hint}"
    )


def _kind_hint(kind: str, last: str) -> str:
    if kind == "status-ready" and last.startswith("HTTP 2"):
        return ("It answers, but not with JSON status \"ready\": a server with another health contract takes "
                "`readiness: any-2xx` (or `first-inference` when it has no health route). ")
    if kind != "first-inference" and last.startswith("HTTP 404"):
        return "It has no such health route: set `health:` to its path, or `readiness: first-inference`. "
    return ""

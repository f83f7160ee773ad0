"""The HTTP server: /v1/systemone (aliases /v1/inference, /api/jev), /health, /v1/models.

A stdlib ThreadingHTTPServer: every connection has its own thread, which parses, tokenizes and
writes; every inference runs on one long-lived model thread (so torch's per-thread state is
built once, not per connection) and takes the model in its turn (one at a time, requests queue),
so /health answers while an inference runs. Every accepted socket has Nagle off and a response
leaves in one send: until 2026-12-01 the head and body went out in two writes with Nagle on, so
each response waited for the client's delayed ACK (about 40 ms on Linux loopback), which was most
of the gap measured between in-process and served inference on the H200
(results/h200-reference-27b-shape/diagnostics/, scripts/h200-serving-gap.py). The port
is bound before the model loads; until the model is loaded and one real warm-up inference has
succeeded, every endpoint answers 503 {"status": "loading"}.

Hostile clients are bounded: at most `max_connections` connections are served at once (more
are answered 503 and closed); a connection idle for `idle_timeout_s` between requests is
closed; a request whose headers and body have not all arrived `header_timeout_s` after its
first byte is cut off. A body that is not JSON is 415; JSON nested deeper than
`limits.MAX_JSON_DEPTH`, an integer of more digits than Python converts, or a string with a
lone surrogate is 400, and so is a NaN or Infinity literal or a number that overflows to
infinity; no response ever holds NaN or Infinity (an answer that would is a 500). Ambiguous
framing (two Content-Length headers, Transfer-Encoding with Content-Length, a Transfer-Encoding
other than chunked, a Content-Length that is not plain digits) is 400 and closes the connection;
chunked alone is 411.

The listen backlog is `LISTEN_BACKLOG` (socketserver's default of 5 made every connection past
the fifth of a burst wait about 1 s for a SYN retransmit). An HTTP/1.0 request that asks for
`Connection: keep-alive` gets it back, so the connection stays open and the client knows it
(`ab -k` waited for a close that never came). With an API key (`api_key`; off by default, as
upstream has none) every request but GET /health needs `Authorization: Bearer KEY`, else 401
`authentication_error`; /health answers without one, but only the contract's `status`, `model`
and `method` (backend/auth.py).

One request holds the model at most `compute_timeout_s` (default 120 s, `--compute-timeout`) per
started 1,024 candidate sequences (`compute_deadline_s`): past it, the inference stops before its
next candidate and the request gets 503 `compute_deadline`. Scaled, so that the contract's largest
requests fit on a CPU host (4,096 questions: 4 x 120 s) while a small request is still cut at 120 s. A request with more candidate sequences than `max_candidates` (upstream's
65536 by default, `--max-candidates` lowers it) is 400 before any inference. /health and
/v1/models never wait for the model. Inferences queue in arrival order, so a small
request behind a huge one waits until the huge one ends: at most the compute deadline per
request ahead of it (docs/backend.md).

Under concurrent load (backend/model_queue.py): inferences take the model first in first out, at
most `max_queue` waiting behind the running one (`--max-queue`, default 32); one more is answered
503 `queue_full` at once, with `Retry-After` (seconds) and `Retry-After-Ms`. Every response whose
request took the model carries `X-Queue-Time-Ms`: from the request read whole to its inference
start (parsing, tokenizing and the wait in line); the body is the same with or without it. No
batching: each candidate runs alone, so an answer never depends on what else is queued. /health
`serving` says so.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from ..limits import JsonLimitError, NonFiniteNumber, has_lone_surrogate, loads_bounded
from .auth import ApiKey
from .model_queue import MAX_QUEUE, ModelQueue, Ticket
from .prompts import MODEL_ALIASES, RequestInvalid, accepted_models, parse_request
from .runtime_identity import RuntimeIdentityReporter
from .tracing import TRACE_FILE_HEADER, TRACE_HEADER, TraceRefused, TraceRequest, Tracing

__all__ = [
    "COMPUTE_TIMEOUT_S",
    "DEADLINE_CANDIDATES",
    "HEADER_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "INFERENCE_PATHS",
    "LISTEN_BACKLOG",
    "MAX_BODY_BYTES",
    "MAX_CANDIDATES",
    "MAX_CONNECTIONS",
    "MAX_QUEUE",
    "ComputeDeadline",
    "ReferenceServer",
    "StaticMeta",
]

MAX_BODY_BYTES = 4 * 1024 * 1024
IDLE_TIMEOUT_S = 300.0  # between requests on one keep-alive connection
HEADER_TIMEOUT_S = 60.0  # from a request's first byte to its last body byte
MAX_CONNECTIONS = 64
MAX_CANDIDATES = 65536  # upstream's limit of candidate sequences per request; --max-candidates lowers it
COMPUTE_TIMEOUT_S = 120.0  # one request's inference per started 1,024 candidates; --compute-timeout (0: none)
DEADLINE_CANDIDATES = 1024  # the compute deadline grows by compute_timeout_s per this many candidate sequences
LISTEN_BACKLOG = 1024  # connections the kernel completes before accept (Linux caps it at net.core.somaxconn)
INFERENCE_PATHS = ("/v1/systemone", "/v1/inference", "/api/jev")
WARMUP_BODY = {"model": MODEL_ALIASES[0], "state": "The server is warming up.",
               "questions": {"warmup": {"type": "noul", "instructions": "Is the server warming up?"}}}


class Deadlines:
    """One watchdog thread for every connection's header deadline (register and cancel cost a dict
    operation; a `threading.Timer` per request started a thread each time: 0.15 ms median, over 1 ms
    on a loaded 2-core host). Expired entries are cut off within `tick_s` of their deadline."""

    def __init__(self, tick_s: float = 0.05):
        self.tick_s = tick_s
        self._lock = threading.Lock()
        self._due: dict[int, tuple[float, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="header-deadlines", daemon=True)
        self._thread.start()

    def start(self, key: int, seconds: float, on_expiry: Any) -> None:
        with self._lock:
            self._due[key] = (time.monotonic() + seconds, on_expiry)

    def cancel(self, key: int) -> None:
        with self._lock:
            self._due.pop(key, None)

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            with self._lock:
                expired = [k for k, (due, _) in self._due.items() if due <= now]
                callbacks = [self._due.pop(k)[1] for k in expired]
            for callback in callbacks:
                callback()


class RequestHead(msgspec.Struct, frozen=True):
    """What the server reads of a request's headers, read once per request."""

    lengths: tuple[str, ...]  # every Content-Length given
    codings: tuple[str, ...]  # every Transfer-Encoding given
    authorization: str | None
    trace: str | None  # X-OpenJev-Trace: the study's trace step only (backend/tracing.py)

    @classmethod
    def of(cls, headers: Message) -> RequestHead:
        trace = headers.get(TRACE_HEADER)
        return cls(tuple(headers.get_all("Content-Length") or ()), tuple(headers.get_all("Transfer-Encoding") or ()),
                   headers.get("Authorization"), None if trace is None else trace.strip())

    def framing_problem(self) -> tuple[int, str] | None:
        """An ambiguous or unsupported body framing (RFC 9112 section 6): (status, message), else None."""
        lengths, codings = self.lengths, self.codings
        if codings and lengths:
            return 400, "a request with both Transfer-Encoding and Content-Length is ambiguous."
        if len(lengths) > 1:
            return 400, "a request with more than one Content-Length header is ambiguous."
        if codings:
            if ",".join(codings).strip().lower() == "chunked":
                return 411, "send the body with a Content-Length, not chunked."
            return 400, f"Transfer-Encoding {','.join(codings)[:40]!r} is not supported; send a Content-Length."
        if lengths and not re.fullmatch(r"[0-9]{1,18}", lengths[0].strip()):
            return 400, "Content-Length is not a non-negative integer."
        return None

    @property
    def content_length(self) -> int:
        """The body's length once framing_problem() found none (0 without a Content-Length)."""
        return int(self.lengths[0]) if self.lengths and self.lengths[0].strip().isdigit() else 0


class ComputeDeadline(Exception):
    """An inference ran past the server's per-request compute deadline."""


class _DeadlineCandidates(list):
    """The candidates of one request, handed to model.answer: iterating them past the deadline raises
    ComputeDeadline, so the model stops between two candidates (the one being scored finishes)."""

    def __init__(self, candidates: list, deadline: float) -> None:
        super().__init__(candidates)
        self.deadline, self.scored = deadline, 0

    def __iter__(self):
        for number, item in enumerate(super().__iter__()):
            if time.monotonic() > self.deadline:
                raise ComputeDeadline
            self.scored = max(self.scored, number)
            yield item


def compute_deadline_s(compute_timeout_s: float, candidates: int) -> float:
    """How long a request of `candidates` sequences may hold the model: compute_timeout_s per started
    DEADLINE_CANDIDATES (0: no limit)."""
    return compute_timeout_s * max(1, -(-candidates // DEADLINE_CANDIDATES))


class StaticMeta(msgspec.Struct, frozen=True, kw_only=True):
    """What never changes while the server runs, in every response's metadata and in /health."""

    base_model_id: str
    base_revision: str | None
    checkpoint_sha256: str | None  # None for --random-init
    method: str
    code_commit: str


class ReferenceServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG  # socketserver's 5 made a burst's sixth connection wait ~1 s (SYN retry)

    def __init__(self, address: tuple[str, int], static_meta: StaticMeta, *,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, header_timeout_s: float = HEADER_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, max_candidates: int = MAX_CANDIDATES,
                 compute_timeout_s: float = COMPUTE_TIMEOUT_S, max_queue: int = MAX_QUEUE,
                 api_key: ApiKey | None = None):
        super().__init__(address, _Handler)
        self.api_key = api_key  # None: no key asked, as upstream
        self.idle_timeout_s, self.header_timeout_s = idle_timeout_s, header_timeout_s
        self.max_connections = max_connections
        self.max_candidates, self.compute_timeout_s = min(max_candidates, MAX_CANDIDATES), compute_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self.model: Any = None
        self.status = "loading"
        self.static_meta = static_meta
        self.model_names: tuple[str, ...] = accepted_models(static_meta.base_model_id)
        self.queue = ModelQueue(max_queue)  # inferences one at a time, in arrival order, bounded
        self.deadlines = Deadlines()
        self.served = 0
        self.tracing = Tracing()  # traced requests refused unless started with --trace-dir (backend/tracing.py)
        # One thread for every inference, warm-up included: torch's per-thread state is built once.
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self.identity = RuntimeIdentityReporter()  # /health `runtime_identity` (issue 39)

    def shutdown(self) -> None:
        """Stop serving; a queued inference is dropped, a running one finishes on its own thread."""
        super().shutdown()
        self.deadlines.close()
        self.model_thread.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ connections

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            _refuse_busy(request, self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    # ------------------------------------------------------------ readiness

    def attach(self, model: Any) -> None:
        """Install the model, run one real warm-up inference, then report ready."""
        self.model = model
        status, payload = self.infer(json.dumps(WARMUP_BODY).encode())
        if status != 200:
            raise RuntimeError(f"warm-up inference failed: {payload}")
        self.identity.start()
        self.status = "ready"

    def models(self) -> dict[str, Any]:
        """GET /v1/models: the names this server answers to, as a list of the OpenAI shape (`data`) and of
        the official SDK's (`models`: name, description, release_date; no release date is known: "")."""
        meta = self.static_meta
        data = [{"id": name, "object": "model", "owned_by": "openjev-repro"} for name in self.model_names]
        models = [{"name": name, "description": f"Open-Jev DecisionModel on {meta.base_model_id} ({meta.method})",
                   "release_date": ""} for name in self.model_names]
        return {"object": "list", "data": data, "models": models}

    def health(self, authorized: bool = True) -> tuple[int, dict[str, Any]]:
        """GET /health: the whole report, or without the API key only the contract's fields."""
        if self.status == "ready" and not authorized:
            return 200, {"status": "ready", "model": MODEL_ALIASES[0], "method": self.static_meta.method}
        if self.status != "ready":
            return 503, {"status": self.status, "model": self.static_meta.base_model_id}
        return 200, {"status": "ready", "model": MODEL_ALIASES[0], "method": self.static_meta.method,
                     "base_model": self.static_meta.base_model_id, "max_length": self.model.settings.max_length,
                     "served": self.served, "busy": self.queue.busy, **self.model.describe(),
                     "auth": "none" if self.api_key is None else "bearer",
                     "serving": self.queue.describe(), "tracing": self.tracing.describe(),
                     "runtime_identity": self.identity.report()}

    # ------------------------------------------------------------ inference

    def infer(self, raw: bytes, ticket: Ticket | None = None,
              trace: TraceRequest | None = None) -> tuple[int, dict[str, Any]]:
        refused, body = _parse_body(raw)
        if refused:
            return refused
        try:
            name, state, questions = parse_request(body, self.model_names)
            candidates = self.model.candidates(state, questions)
        except RequestInvalid as exc:
            return exc.status, _error("validation_error", str(exc), exc.field)
        if len(candidates) > self.max_candidates:
            return 400, _error("validation_error", f"the request has {len(candidates)} candidate sequences, over "
                               f"this server's limit of {self.max_candidates} (--max-candidates).", "questions")
        with self.queue.turn(ticket):
            started = time.perf_counter()
            try:
                answers = self._answer(state, questions, candidates, trace)
            except ComputeDeadline as exc:
                return 503, _error("compute_deadline", str(exc))
            except Exception as exc:  # noqa: BLE001 - any failure inside the model becomes a 500; the server keeps serving
                traceback.print_exc(file=sys.stderr)
                return 500, _error("inference_error", f"inference failed: {type(exc).__name__}: {exc}")
            seconds = time.perf_counter() - started
            self.served += 1
        tokens = [len(c.ids) for c in candidates]
        return 200, {"model": name, "answers": answers,
                     "usage": {"input_tokens": sum(tokens), "output_tokens": 0},
                     "metadata": self._metadata(seconds, tokens)}

    def _metadata(self, seconds: float, tokens: list[int]) -> dict[str, Any]:
        """An answer's metadata: how it was computed (scripts/serving-stages.py wraps this to time the stages)."""
        model, meta = self.model, self.static_meta
        return {"method": meta.method, "temperature": model.temperature,
                "candidate_sequences": len(tokens), "candidate_tokens": tokens,
                "inference_seconds": seconds, "prefix_cache": False,
                "checkpoint_sha256": meta.checkpoint_sha256,
                "base_revision": meta.base_revision, "max_length": model.settings.max_length,
                "backbone_parameter_dtypes": model.backbone_dtypes(),
                "code_commit": meta.code_commit, "mode": model.settings.mode,
                "prompt_format": model.settings.prompt_format,
                "device": str(model.device), "implementations": model.implementations,
                "cuda_graphs": model.graphs.stats() if model.graphs else None}

    def _answer(self, state: Any, questions: Any, candidates: list, trace: TraceRequest | None = None) -> Any:
        """model.answer on the model thread (under the profiler for a traced request), ended between two
        candidates once compute_timeout_s has passed."""
        answer = self.model.answer if trace is None else trace.around(self.model)
        if not self.compute_timeout_s:
            return self.model_thread.submit(answer, state, questions, candidates).result()
        allowed = compute_deadline_s(self.compute_timeout_s, len(candidates))
        bounded = _DeadlineCandidates(candidates, time.monotonic() + allowed)
        try:
            return self.model_thread.submit(answer, state, questions, bounded).result()
        except ComputeDeadline:
            raise ComputeDeadline(f"the inference ran past this server's compute deadline of {allowed:g} s "
                                  f"(--compute-timeout) after {bounded.scored} of {len(candidates)} candidate "
                                  f"sequences ({self.compute_timeout_s:g} s per started {DEADLINE_CANDIDATES}); "
                                  "send fewer candidates per request.") from None


def _parse_body(raw: bytes) -> tuple[tuple[int, dict[str, Any]] | None, Any]:
    """(None, body) for standard JSON within the limits, else (the refusal, None)."""
    try:
        body = loads_bounded(raw.decode("utf-8"), finite=True)
    except NonFiniteNumber as exc:
        return (400, _error("bad_request", f"the request body holds {exc}; JSON numbers are finite.")), None
    except JsonLimitError as exc:
        return (400, _error("bad_request", f"the request body is {exc}.")), None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return (415, _error("unsupported_media_type", f"the request body is not JSON ({exc}).")), None
    except ValueError as exc:  # e.g. an integer longer than Python converts (int_max_str_digits)
        return (400, _error("bad_request", f"the request body holds a value out of range ({exc}).")), None
    if has_lone_surrogate(body):
        return (400, _error("bad_request", "the request body holds a string with a lone UTF-16 surrogate "
                                           "(not valid Unicode text).")), None
    return None, body


def _refuse_busy(request: socket.socket, limit: int) -> None:
    body = json.dumps(_error("too_many_connections", f"more than {limit} open connections; retry later.")).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        request.settimeout(1.0)
        request.sendall(head + body)
    except OSError:
        pass


def _error(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": kind, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}


_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_SERVER = f"{BaseHTTPRequestHandler.server_version} {BaseHTTPRequestHandler.sys_version}"
_date = (0, "")  # (second, its HTTP date): formatted once a second, not per response


def _http_date() -> str:
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, formatdate(now, usegmt=True))
    return _date[1]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # head and body leave in one send (handle_one_request flushes after each response)
    server: ReferenceServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would dominate the log of a 74 x 3 pass study

    def setup(self) -> None:
        # every socket read and write; the idle limit (per server, so set on the instance; typeshed says ClassVar)
        self.timeout = self.server.idle_timeout_s  # type: ignore[misc]
        # No Nagle: a response must leave as soon as it is written. With Nagle on, a response
        # written in two parts waited for the client's delayed ACK of the first: about 40 ms per
        # request on Linux loopback, inside every latency the runner measured (found 2026-12-01).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()
        self._deadline = False

    def handle_one_request(self) -> None:
        """Wait (idle limit) for a request's first byte, then give it header_timeout_s to arrive whole."""
        try:
            if not self.rfile.peek(1):  # type: ignore[attr-defined]
                self.close_connection = True
                return
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        self.server.deadlines.start(id(self), self.server.header_timeout_s, self._cut_off)
        self._deadline = True
        try:
            super().handle_one_request()
        finally:
            self._received()

    def _received(self) -> None:
        if self._deadline:
            self.server.deadlines.cancel(id(self))
            self._deadline = False

    def _cut_off(self) -> None:
        """The request did not arrive in time: end the connection (its thread then returns)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        """The response, head and body, in one write: the head formatted at once (send_response and
        send_header format the date and log per call and write per header)."""
        try:
            data = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except ValueError:  # a NaN or infinity in an answer: never sent as non-standard JSON
            status, payload = 500, _error("inference_error", "the answer holds a non-finite number.")
            data = json.dumps(payload).encode("utf-8")
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items()) if headers else ""
        if self.close_connection:
            extra += "Connection: close\r\n"
        elif self.request_version == "HTTP/1.0":  # kept open on request: say so, or the client waits for a close
            extra += "Connection: keep-alive\r\n"
        head = (f"HTTP/1.1 {status} {_PHRASES[status]}\r\nServer: {_SERVER}\r\nDate: {_http_date()}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n")
        self.wfile.write(head.encode("latin-1") + data)

    def _authorized(self, head: RequestHead) -> bool:
        """No key asked, or the request carries it; else answer 401 and say False."""
        key = self.server.api_key
        if key is None or key.admits(head.authorization):
            return True
        self._send(401, key.refusal(head.authorization), {"WWW-Authenticate": 'Bearer realm="openjev-repro"'})
        return False

    def do_GET(self) -> None:
        self._received()
        head = RequestHead.of(self.headers)
        if head.framing_problem() or head.content_length:
            self.close_connection = True  # a body on a GET is never read: it must not become the next request
        path = self.path.split("?", 1)[0]
        if path == "/health":
            key = self.server.api_key
            self._send(*self.server.health(authorized=key is None or key.admits(head.authorization)))
        elif not self._authorized(head):
            return
        elif path == "/v1/models":
            self._send(200, self.server.models())
        else:
            self._send(404, _error("not_found", f"no endpoint {path}; use /v1/systemone, /health or /v1/models."))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        head = RequestHead.of(self.headers)
        problem = head.framing_problem()
        if problem:
            self.close_connection = True  # the body's end is unknown: nothing more is read from this connection
            self._send(problem[0], _error("length_required" if problem[0] == 411 else "bad_request", problem[1]))
            return
        length = head.content_length
        key = self.server.api_key
        if path not in INFERENCE_PATHS or (key is not None and not key.admits(head.authorization)):
            self._drain_or_close(length)  # an unread body must not be read as the next request
            if path not in INFERENCE_PATHS:
                self._send(404, _error("not_found", f"no endpoint {path}; POST to /v1/systemone."))
            else:
                self._authorized(head)
            return
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not be parsed as the next request
            self._send(413, _error("payload_too_large", f"the body has {length} bytes, over the "
                                   f"{MAX_BODY_BYTES}-byte (4 MiB) limit."))
            return
        raw = self.rfile.read(length)
        received = time.perf_counter()  # the request is read whole: its queue time starts
        self._received()
        if len(raw) < length:  # cut off (deadline) or the client hung up mid-body
            self.close_connection = True
            return
        if self.server.status != "ready":
            self._send(503, {"status": self.server.status, "error": {"type": "not_ready",
                                                                     "message": "the model is still loading."}})
            return
        self._infer_in_turn(raw, received, head.trace)

    def _infer_in_turn(self, raw: bytes, received: float, trace_name: str | None) -> None:
        """Admit the request to the model's queue (503 queue_full when full), infer in its turn,
        answer with X-Queue-Time-Ms when it reached the model."""
        queue = self.server.queue
        trace = None
        if trace_name is not None:  # the study's trace step only (backend/tracing.py)
            try:
                trace = self.server.tracing.claim(trace_name)
            except TraceRefused as exc:
                self._send(exc.status, _error(exc.kind, exc.message))
                return
        ticket = queue.admit(received)
        if ticket is None:
            message, headers = queue.refusal()
            self._send(503, _error("queue_full", message), headers)
            return
        try:
            status, payload = self.server.infer(raw, ticket, trace)
        finally:
            queue.leave(ticket)
        waited = ticket.queue_ms
        headers = {} if waited is None else {"X-Queue-Time-Ms": f"{waited:.3f}"}
        if trace is not None and status == 200:
            headers[TRACE_FILE_HEADER] = trace.path.name
        self._send(status, payload, headers or None)

    def _drain_or_close(self, length: int) -> None:
        if length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        else:
            self.close_connection = True

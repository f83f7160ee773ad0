"""One request sent and recorded: `PassRunner.request` times it, checks the answer, writes its row
and its response body (`ResponseLog`); `Via` says how a request of a load level is sent.

Timed code does as little as possible: request bodies are serialised before the clock starts
(workload.build_requests), the client times from send to last byte, and parsing happens afterwards.
The order of requests, passes and steps is the pass protocol's (study/passes.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Literal

import msgspec

from ..decision import decision_of
from ..errors import BackendCrashed, ProtocolError
from ..evidence.records import ResponseEntry
from ..evidence.rows import Phase, Row, RowWriter
from .timed_client import ClientError, TimedClient, TimedResponse
from .workload import QUESTION_ID, Request

__all__ = ["QUEUE_TIME_HEADER", "Outcome", "ParsedAnswer", "PassRunner", "ResponseLog", "Via", "parse_noul_response", "queue_time_ms"]

QUEUE_TIME_HEADER = "x-queue-time-ms"  # the server's own queue time of a request, float ms (lower-case: h11)

Outcome = tuple[Row, bytes | None]


@dataclass(frozen=True)
class ParsedAnswer:
    probability: float
    decision: str
    input_tokens: int


class _NoulAnswer(msgspec.Struct):
    """The answer to our one noul question (a server may add fields; those are not ours to read)."""

    type: Literal["noul"]
    noul: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.noul) or not 0.0 <= self.noul <= 1.0:
            raise ValueError(f"probability {self.noul!r} is not a finite number in [0, 1]")


class _Usage(msgspec.Struct):
    input_tokens: Annotated[int, msgspec.Meta(gt=0, le=2**62)] | list[Annotated[int, msgspec.Meta(ge=0, le=2**62)]]

    @property
    def tokens(self) -> int:
        """One positive count (a list of per-candidate counts is summed; noul has one candidate)."""
        total = self.input_tokens if isinstance(self.input_tokens, int) else sum(self.input_tokens)
        if total <= 0:
            raise ProtocolError(f"usage.input_tokens {self.input_tokens!r} is not a positive integer")
        return total


class _NoulResponse(msgspec.Struct):
    """A /v1/systemone response to a request of one noul question, as far as the study reads it."""

    answers: dict[str, _NoulAnswer]
    usage: _Usage


def parse_noul_response(body: bytes) -> ParsedAnswer:
    """Check a /v1/systemone response to a single noul question; ProtocolError says what is wrong."""
    try:
        data = json.loads(body)  # Python's reader: a NaN probability is named as such, not as bad JSON
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"response is not JSON ({exc.__class__.__name__}: {exc})") from None
    try:
        response = msgspec.convert(data, _NoulResponse, strict=True)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"response is not a noul answer with usage.input_tokens: {exc}") from None
    answer = response.answers.get(QUESTION_ID)
    if answer is None:
        raise ProtocolError(f"response lacks answers.{QUESTION_ID}")
    return ParsedAnswer(answer.noul, decision_of(answer.noul), response.usage.tokens)


QUEUE_TIME_SLACK_MS = 1000.0  # the server's clock against ours: a queue time may exceed the latency by this


def queue_time_ms(headers: dict[str, str], latency_ns: int | None = None) -> float | None:
    """The server's `X-Queue-Time-Ms` header as a finite, non-negative float no longer than the request
    itself took (its latency as the client measured it, plus QUEUE_TIME_SLACK_MS); None otherwise.

    A request cannot wait in the server's queue longer than it took in all: a larger value (1e308, a
    misread clock) is not a queue time, and is recorded as absent (`PassRunner.queue_times_refused`)."""
    try:
        value = float(headers[QUEUE_TIME_HEADER])
    except (KeyError, ValueError):
        return None
    bound = math.inf if latency_ns is None else latency_ns / 1e6 + QUEUE_TIME_SLACK_MS
    return value if math.isfinite(value) and 0 <= value <= bound else None


@dataclass(frozen=True)
class Via:
    """How a request of a load level is sent: its level, the connection (and its client) that
    sends it and, in open loop, the time it was scheduled for (the clock of `start_ns`)."""

    level: str
    connection: int
    client: TimedClient
    scheduled_ns: int | None = None


@dataclass
class PassRunner:
    """Runs requests of one backend and records every one: over one persistent connection, or
    (load levels) over the connection a `Via` names, from several threads at once."""

    backend: str
    client: TimedClient
    endpoint: str
    rows: RowWriter
    responses: ResponseLog
    alive: Callable[[], bool]
    on_row: Callable[[Row], None] = lambda row: None
    failures: list[Row] = field(default_factory=list)
    requests: int = 0  # sent, failed ones included
    queue_times_refused: int = 0  # X-Queue-Time-Ms headers that were no queue time (recorded as absent)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # rows and counts, across threads

    def request(self, req: Request, *, workload: str, phase: Phase, pass_index: int, seq: int,
                via: Via | None = None) -> Row:
        headers = {"Content-Type": "application/json"}
        client = self.client if via is None else via.client
        with self._lock:
            self.requests += 1
        try:
            resp: TimedResponse = client.request("POST", self.endpoint, req.body, headers)
        except (ClientError, ProtocolError) as exc:  # a timeout, reset, refused connection or bad bytes: record, then decide
            row = self._with_load(self._row(req, workload, phase, pass_index, seq, 0, 0, None, None, None,
                                            f"{exc.__class__.__name__}: {exc}"), via, None)
            client.close()  # the connection state is unknown; the next request reconnects
            self._record(row, None)
            if not self._still_alive_after(1.0):
                raise BackendCrashed(f"Backend {self.backend} died during {phase} pass {pass_index} "
                                     f"(request {seq}, case {req.id}): {exc}") from None
            return row
        digest = hashlib.sha256(resp.body).hexdigest()
        error = parsed = None
        if resp.status != 200:
            error = f"HTTP {resp.status}: {resp.body[:300].decode('utf-8', 'replace')}"
        else:
            try:
                parsed = parse_noul_response(resp.body)
            except ProtocolError as exc:
                error = str(exc)
        row = self._with_load(self._row(req, workload, phase, pass_index, seq, resp.start_ns, resp.end_ns,
                                        resp.status, digest, parsed, error, resp.reconnected), via, resp)
        self._record(row, resp.body)
        if not self.alive():  # an aux worker (or the server) died although this answer arrived
            raise BackendCrashed(f"Backend {self.backend} (or one of its processes) died during {phase} pass "
                                 f"{pass_index} after request {seq} (case {req.id}).")
        return row

    def _still_alive_after(self, seconds: float) -> bool:
        """A reset connection often precedes the process's exit by a few ms: give it time to show."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            time.sleep(0.05)
        return self.alive()

    def _row(self, req: Request, workload: str, phase: Phase, pass_index: int, seq: int, start: int, end: int,
             status: int | None, digest: str | None, parsed: ParsedAnswer | None, error: str | None,
             reconnected: bool | None = None) -> Row:
        return Row(id=req.id, backend=self.backend, workload=workload, phase=phase, pass_index=pass_index,
                   seq=seq, start_ns=start, end_ns=end, status=status, body_sha256=digest,
                   probability=parsed.probability if parsed else None,
                   decision=parsed.decision if parsed else None, label=req.label,
                   input_tokens=parsed.input_tokens if parsed else None, error=error, reconnected=reconnected)

    def _with_load(self, row: Row, via: Via | None, resp: TimedResponse | None) -> Row:
        """The row with its load-level fields (none without a `via`, so default rows stay as they were)."""
        if via is None:
            return row
        queue = None if resp is None else queue_time_ms(resp.headers, resp.latency_ns)
        if queue is None and resp is not None and QUEUE_TIME_HEADER in resp.headers:
            with self._lock:
                self.queue_times_refused += 1
        return dataclasses.replace(row, level=via.level, scheduled_ns=via.scheduled_ns, connection=via.connection,
                                   server_queue_ms=queue)

    def _record(self, row: Row, body: bytes | None) -> None:
        with self._lock:
            self.rows.write(row)
            self.responses.write(row, body)
            if row.error is not None:
                self.failures.append(row)
            self.on_row(row)


class ResponseLog:
    """Response bodies beside the rows (never published: JevBench terms allow aggregates only)."""

    def __init__(self, path) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the run; close() closes it

    def write(self, row: Row, body: bytes | None) -> None:
        entry = ResponseEntry.of(row.backend, row.workload, row.phase, row.pass_index, row.seq, row.id, body)
        self._file.write(entry.line())
        self._file.flush()

    def close(self) -> None:
        self._file.close()

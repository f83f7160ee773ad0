"""Load levels: closed-loop concurrency and open-loop arrivals, each over its own connections.

A workload's `load` (evidence.recipe.Load) names levels; each level runs the protocol's
feasibility and measured passes over the workload's requests, in `seq` order of arrival:

closed-c{N}  N workers, each with its own keep-alive connection, take the next request of the
             pass as soon as their previous one is answered. Rows carry `level` and
             `connection`; latency is `end_ns - start_ns`, as at concurrency 1.
open-r{R}    Arrival times come from one schedule per level (poisson: exponential gaps
             seeded by `seed`; fixed: one every 1/R s), computed from the level alone and
             continued by each of its passes (`ArrivalStream`), so a pass starts where the
             previous pass's schedule ended, whatever the server did meanwhile. A bounded pool of connections sends each request at its time;
             when every connection is busy the request goes out late, on the first free one.
             Rows carry `scheduled_ns` beside the actual send (`start_ns`), so latency is
             measured from the schedule (`Row.from_schedule_ns`): a stall of the server or the
             client is counted in every request it delayed (no coordinated omission), and
             `Row.late_ns` shows how far the client fell behind its schedule.

Connections are opened before a level's first pass and closed after its last, so connecting is
never inside a measurement or a schedule. Rows are written from the sending threads (the
runner's lock orders them); the pass's progress is reported after it ends, so that drawing a
progress bar never takes the interpreter from a thread that is timing a request.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

from ..evidence.recipe import LoadLevel
from ..evidence.rows import Phase, Row
from .sender import PassRunner, Via
from .timed_client import TimedClient
from .workload import Request

__all__ = ["MAX_SCHEDULE_S", "ArrivalStream", "LevelConnections", "arrival_offsets_ns", "connection_count",
           "merged_connections", "run_level_pass", "schedule_problem"]

OPEN_MIN_CONNECTIONS = 8  # an open-loop level never has fewer senders than this (or than its requests)
OPEN_IN_FLIGHT_S = 1.0  # ... and enough for one second of arrivals at its rate
OPEN_MAX_CONNECTIONS = 256
SCHEDULE_LEAD_NS = 20_000_000  # the schedule starts 20 ms after the senders are started
MAX_SCHEDULE_S = 600.0  # an open-loop pass's arrival schedule spans at most this (docs/load.md)
STOP_WAIT_S = 5.0  # after a stop, how long the senders get to record the requests their stop ended
_SLEEP_SLICE_NS = 2_000_000  # a due sender waits in an Event until 2 ms before, then sleeps the rest


class ArrivalStream:
    """An open-loop level's send times, one stream for all its passes (feasibility and measured).

    poisson: gaps drawn from an exponential distribution of mean 1/rate by `random.Random(seed)`; fixed:
    1/rate. A pass takes the next `count` times of the stream, so a pass starts where the previous one's
    schedule ended, not after its last response: a stall across a pass boundary delays (and is counted in)
    the next pass's first requests instead of suppressing their arrivals (docs/load.md)."""

    def __init__(self, level: LoadLevel) -> None:
        if level.kind != "open" or level.rate_per_s is None:
            raise ValueError(f"level {level.id} has no arrival rate")
        self.level, self.rate = level, level.rate_per_s
        self._draw = random.Random(level.seed).expovariate
        self._sent, self._at = 0, 0.0

    def take(self, count: int) -> list[int]:
        """The next `count` send times, in ns after the stream's start (its first request is due at 0)."""
        if self.level.arrivals == "fixed":
            offsets = [round(i * 1e9 / self.rate) for i in range(self._sent, self._sent + count)]
        else:
            offsets = []
            for _ in range(count):
                if self._sent + len(offsets):
                    self._at += self._draw(self.rate) * 1e9
                offsets.append(round(self._at))
        self._sent += count
        return offsets


def arrival_offsets_ns(level: LoadLevel, count: int) -> list[int]:
    """The first `count` send times of an open-loop level, in ns after its schedule's start (`ArrivalStream`)."""
    return ArrivalStream(level).take(count)


def schedule_problem(level: LoadLevel, count: int) -> str | None:
    """Why an open-loop level's pass of `count` requests would last too long (its arrival schedule spans
    more than MAX_SCHEDULE_S); None when it does not, or for a closed level."""
    if level.kind != "open" or count < 2:
        return None
    span_s = arrival_offsets_ns(level, count)[-1] / 1e9
    if span_s <= MAX_SCHEDULE_S:
        return None
    return (f"level {level.id}: its arrival schedule spans {span_s:.0f} s for {count} requests, over the "
            f"{MAX_SCHEDULE_S:.0f} s an open-loop pass may take; raise rates_per_s or send fewer requests")


def connection_count(level: LoadLevel, requests: int) -> int:
    """How many connections (sending threads) a level uses for a pass of `requests` requests."""
    if level.kind == "closed":
        wanted = level.concurrency or 1
    else:
        wanted = max(OPEN_MIN_CONNECTIONS, math.ceil((level.rate_per_s or 0.0) * OPEN_IN_FLIGHT_S))
    return max(1, min(wanted, requests, OPEN_MAX_CONNECTIONS))


def merged_connections(clients: Sequence[TimedClient]) -> dict[str, object]:
    """`TimedClient.connections()` summed over clients (one client: exactly its own)."""
    merged: dict[str, object] = {"connections_opened": 0, "closed_by_server": 0, "reconnected_requests": 0}
    versions: set[str] = set()
    for client in clients:
        stats = client.connections()
        for key in ("connections_opened", "closed_by_server", "reconnected_requests"):
            merged[key] = int(merged[key]) + int(stats[key])  # type: ignore[call-overload]
        versions.update(stats["http_versions"])  # type: ignore[arg-type]
    merged["http_versions"] = sorted(versions)
    return merged


class LevelConnections:
    """The clients of one level, opened before its first pass and closed after its last; in open loop also the
    level's one schedule, which its passes continue (`schedule`)."""

    def __init__(self, make_client: Callable[[], TimedClient], count: int) -> None:
        self.clients = [make_client() for _ in range(count)]
        self._stream: ArrivalStream | None = None
        self._origin_ns = 0

    def schedule(self, level: LoadLevel, count: int) -> list[int]:
        """Absolute send times (monotonic ns) of the next pass of `count` requests: the level's stream, started
        `SCHEDULE_LEAD_NS` after its first pass begins and continued by every later pass."""
        if self._stream is None or self._stream.level != level:
            self._stream, self._origin_ns = ArrivalStream(level), time.monotonic_ns() + SCHEDULE_LEAD_NS
        return [self._origin_ns + offset for offset in self._stream.take(count)]

    def __enter__(self) -> Self:
        try:
            for client in self.clients:
                client.connect()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for client in self.clients:
            client.close()


@dataclass
class _PassState:
    """What the senders of one pass share: the next request to take and what went wrong."""

    requests: Sequence[Request]
    scheduled: list[int] | None  # absolute send times (open loop), by seq
    rows: list[Row] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> int | None:
        """The seq of the next request to send, or None when every request is taken (or a sender failed)."""
        with self._lock:
            if self.stop.is_set() or self._next >= len(self.requests):
                return None
            self._next += 1
            return self._next - 1


@dataclass(frozen=True)
class _Pass:
    runner: PassRunner
    level: LoadLevel
    workload: str
    phase: Phase
    index: int


def _send_loop(job: _Pass, state: _PassState, connection: int, client: TimedClient) -> None:
    """One sender: take the next request, wait for its time (open loop), send it, record its row."""
    try:
        while (seq := state.take()) is not None:
            due = None if state.scheduled is None else state.scheduled[seq]
            # open loop: wait for its time (at once when it has passed, or when the pass is stopping)
            while due is not None and (left := due - time.monotonic_ns()) > 0 and not state.stop.is_set():
                if left > _SLEEP_SLICE_NS:
                    state.stop.wait((left - _SLEEP_SLICE_NS) / 1e9)
                else:
                    time.sleep(left / 1e9)
            via = Via(job.level.id, connection, client, due)
            row = job.runner.request(state.requests[seq], workload=job.workload, phase=job.phase,
                                     pass_index=job.index, seq=seq, via=via)
            state.rows.append(row)
    except BaseException as exc:  # noqa: BLE001 - handed to the pass's thread, which raises it
        state.errors.append(exc)
        state.stop.set()


def run_level_pass(runner: PassRunner, connections: LevelConnections, level: LoadLevel, requests: Sequence[Request],
                   *, workload: str, phase: Phase, index: int) -> list[Row]:
    """One pass of a level over `requests`: every row (in order of completion); the first error a sender hit is raised."""
    clients = connections.clients
    scheduled = None
    if level.kind == "open":
        scheduled = connections.schedule(level, len(requests))
    state = _PassState(requests, scheduled)
    job = _Pass(runner, level, workload, phase, index)
    senders = [threading.Thread(target=_send_loop, args=(job, state, i, client), daemon=True,
                                name=f"load-{level.id}-{i}") for i, client in enumerate(clients)]
    try:
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
    except BaseException:  # an interrupt (SIGTERM, Ctrl-C): end the requests in flight, wait a bounded time
        state.stop.set()
        for client in clients:
            client.abort()
        deadline = time.monotonic() + STOP_WAIT_S
        for sender in senders:
            if sender.ident is not None:  # the interrupt may come before every sender started
                sender.join(max(0.0, deadline - time.monotonic()))
        raise
    if state.errors:
        raise state.errors[0]
    return state.rows

"""The reference server's request queue: one model, inferences one at a time in arrival order.

A request is admitted once its body has been read whole (`admit`, given that moment); at most
`max_queue` admitted requests wait behind the one the model runs, and one more is refused at
once (`admit` returns None: the server answers 503 `queue_full` with `Retry-After`). An admitted
request takes the model in its turn (`turn`, first in first out, unlike a plain lock, whose
waiters wake in no set order) and leaves the queue when its answer is computed (`leave`), before
the response is written, so a slow reader holds no place. A ticket records when its request was
read and when it took the model: the difference is the response's `X-Queue-Time-Ms` header.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["MAX_QUEUE", "ModelQueue", "Ticket"]

MAX_QUEUE = 32  # requests waiting behind the running one; --max-queue (0: none wait, a busy model refuses)
_RECENT = 16    # inference hold times averaged for Retry-After


class Ticket:
    """One inference request's place: read whole at `received`, took the model at `started`
    (both time.perf_counter seconds; started is None until its turn came). `counted`: admitted
    under the bound (the warm-up's ticket is not); `turn`: the event it waits on, only when it
    found the model busy (an idle model is taken without one: a few microseconds less per request)."""

    __slots__ = ("counted", "received", "started", "turn")

    def __init__(self, received: float, counted: bool = True) -> None:
        self.received, self.counted = received, counted
        self.started: float | None = None
        self.turn: threading.Event | None = None

    @property
    def queue_ms(self) -> float | None:
        """Milliseconds from the request read whole to its inference start; None before its turn."""
        return None if self.started is None else (self.started - self.received) * 1000.0


class ModelQueue:
    """A bounded first-in-first-out queue in front of one model (one worker, no batching)."""

    workers = 1
    batching = False

    def __init__(self, max_queue: int = MAX_QUEUE) -> None:
        self.max_queue = max_queue
        self.admitted, self.refused = 0, 0  # since start (the warm-up is neither)
        self._lock = threading.Lock()
        self._admitted = 0
        self._line: deque[Ticket] = deque()
        self._running: Ticket | None = None
        self._holds: deque[float] = deque(maxlen=_RECENT)

    # ------------------------------------------------------------ admission

    def admit(self, received: float) -> Ticket | None:
        """A ticket for a request read whole at `received`, or None when max_queue already wait."""
        with self._lock:
            if self._admitted >= self.max_queue + self.workers:
                self.refused += 1
                return None
            self._admitted += 1
            self.admitted += 1
            return Ticket(received)

    def leave(self, ticket: Ticket) -> None:
        """The request's answer is computed (or it never reached the model): its place is free."""
        if ticket.counted:
            with self._lock:
                self._admitted -= 1
                ticket.counted = False

    # ------------------------------------------------------------ the model, one at a time

    @contextmanager
    def turn(self, ticket: Ticket | None = None) -> Iterator[Ticket]:
        """Hold the model: wait until every ticket that asked before has had it. Without a ticket
        (the warm-up, before the server is ready) one is made outside the bound."""
        ticket = ticket or Ticket(time.perf_counter(), counted=False)
        with self._lock:
            if self._running is None:
                self._running = ticket
            else:
                ticket.turn = threading.Event()
                self._line.append(ticket)
        if ticket.turn is not None:
            ticket.turn.wait()
        ticket.started = time.perf_counter()
        try:
            yield ticket
        finally:  # pass the model on to the next in line
            with self._lock:
                self._holds.append(time.perf_counter() - (ticket.started or ticket.received))
                self._running = self._line.popleft() if self._line else None
                if self._running is not None and self._running.turn is not None:
                    self._running.turn.set()

    # ------------------------------------------------------------ what /health and a refusal say

    @property
    def busy(self) -> bool:
        return self._running is not None

    def refusal(self) -> tuple[str, dict[str, str]]:
        """What a request that finds max_queue requests already waiting is told (the server's 503 queue_full):
        the message and when to retry, in seconds (HTTP's whole seconds, at least 1) and in milliseconds
        (Retry-After-Ms, which SDKs prefer). A place frees when the running inference ends, so the wait is
        the mean hold of the last inferences (1 s before any), at least 1 ms."""
        with self._lock:
            mean = sum(self._holds) / len(self._holds) if self._holds else 1.0
        retry_ms = max(1, math.ceil(mean * 1000.0))
        message = f"{self.max_queue} requests are already waiting for the model (--max-queue); retry in about {retry_ms} ms."
        return message, {"Retry-After": str(max(1, -(-retry_ms // 1000))), "Retry-After-Ms": str(retry_ms)}

    def describe(self) -> dict[str, object]:
        """/health `serving`: how this server takes concurrent requests. `waiting`: admitted requests not
        holding the model (reading their body is over; parsing or in line)."""
        with self._lock:
            waiting = max(0, self._admitted - (1 if self._running is not None and self._running.counted else 0))
        return {"workers": self.workers, "batching": self.batching, "order": "arrival", "max_queue": self.max_queue,
                "waiting": waiting, "admitted": self.admitted, "refused": self.refused, "queue_time_header": "X-Queue-Time-Ms"}

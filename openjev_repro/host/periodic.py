"""A background thread that calls a sampler's `_tick()` every `period_s` until stopped.

Shared by the memory sampler and the GPU state sampler: one lifecycle (start once, stop, context
manager), each sampler saying only what one tick reads."""

from __future__ import annotations

import threading
import time
from typing import Self

from ..errors import HostError

__all__ = ["PeriodicSampler"]


class PeriodicSampler:
    """Subclasses set `period_s` and `uuid`, call `_init_periodic(what)` and define `_tick()`."""

    period_s: float
    uuid: str

    def _init_periodic(self, what: str) -> None:
        self._what = what  # "memory sampler", "GPU state sampler": for the names and the error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _start_thread(self) -> None:
        if self._thread is not None:
            raise HostError(f"This {self._what} was already started; make a new one per study.")
        name = f"{self._what.replace(' ', '-')}-{self.uuid}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._start_thread()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self._tick()
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))

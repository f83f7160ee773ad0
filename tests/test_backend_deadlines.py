"""The server's header deadlines: one watchdog thread, cut-off after the deadline, none once cancelled."""

from __future__ import annotations

import threading
import time

from openjev_repro.backend.server import Deadlines


def test_expired_deadline_fires_once_and_a_cancelled_one_never() -> None:
    deadlines = Deadlines(tick_s=0.01)
    fired: list[str] = []
    try:
        started = time.monotonic()
        deadlines.start(1, 0.2, lambda: fired.append("late"))
        deadlines.start(2, 0.2, lambda: fired.append("cancelled"))
        deadlines.cancel(2)
        while not fired and time.monotonic() - started < 5:
            time.sleep(0.01)
        waited = time.monotonic() - started
        time.sleep(0.3)
    finally:
        deadlines.close()
    assert fired == ["late"]
    assert waited >= 0.2


def test_requests_start_no_thread_of_their_own() -> None:
    deadlines = Deadlines()
    try:
        before = threading.active_count()
        for key in range(1000):
            deadlines.start(key, 60.0, lambda: None)
        assert threading.active_count() == before
        for key in range(1000):
            deadlines.cancel(key)
    finally:
        deadlines.close()

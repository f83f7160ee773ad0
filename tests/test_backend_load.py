"""The reference backend under concurrent load: a bounded first-in-first-out queue in front of the
one model, 503 queue_full with Retry-After when it is full, X-Queue-Time-Ms on every response that
reached the model, /health `serving`. Real server processes on loopback ports, real concurrent
HTTP clients; requests whose state holds SLOW_MARK hold the model for a known time
(tests/servers/faulty_backend.py), so the queue fills when the test says."""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

SLOW_MARK = "PLEASE-BE-SLOW"
FAULTY = str(Path(__file__).parent / "servers" / "faulty_backend.py")
# A script's sys.path starts at its own folder: the checkout's package first, not an installed one.
CHECKOUT_FIRST = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
BODY_KEYS = {"model", "answers", "usage", "metadata"}


def _faulty(start_server, checkpoint: Path, slow_seconds: float, *flags: str):
    server = start_server(["--checkpoint", str(checkpoint), "--mode", "raw", "--max-length", "4096", *flags],
                          env=CHECKOUT_FIRST, program=[FAULTY, "--slow-on", SLOW_MARK, "--slow-seconds", str(slow_seconds)])
    server.wait_ready()
    return server


# How long a marked request holds the model. A test polls /health to see the queue in a state (busy,
# one waiting, one admitted); /health also reports the runtime identity, which takes a second or more
# on a loaded two-core host, so a hold lasts several /health answers. Bounds use the requests' own clocks.
HOLD_S = 6.0  # the queue-full test: the holder's turn
TURN_S = 5.0  # the arrival-order test: each request's turn


@pytest.fixture(scope="module")
def one_waits(start_server, fixture_checkpoint: Path):
    """At most one request waits behind the running one; marked requests hold the model HOLD_S."""
    return _faulty(start_server, fixture_checkpoint, HOLD_S, "--max-queue", "1")


@pytest.fixture(scope="module")
def default_queue(start_server, fixture_checkpoint: Path):
    """The default queue bound; marked requests hold the model TURN_S."""
    return _faulty(start_server, fixture_checkpoint, TURN_S)


def noul(state: str = "The meeting is on Monday.") -> dict:
    return {"model": "open-jev", "state": state,
            "questions": {"q": {"type": "noul", "instructions": "Is the meeting on Monday?"}}}


def post(server, body: dict) -> httpx.Response:
    """One request on its own connection (a client of its own), as concurrent clients send them."""
    return httpx.post(f"{server.url}/v1/systemone", content=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"}, timeout=60)


def serving(server) -> dict:
    return httpx.get(f"{server.url}/health", timeout=10).json()["serving"]


def await_health(server, ready, timeout: float = 20.0) -> dict:
    """Poll /health (it never waits for the model) until `ready(health)`; the health body."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        if ready(health):
            return health
        time.sleep(0.01)
    raise TimeoutError(f"/health never reached the awaited state: {health}")


def timed_post(server, body: dict) -> tuple[httpx.Response, float, float]:
    sent = time.monotonic()
    response = post(server, body)
    return response, sent, time.monotonic()


# ------------------------------------------------------------------ queue full

def test_a_full_queue_is_503_queue_full_with_retry_after(one_waits) -> None:
    # Every bound is measured against the requests' own clocks (the holder's 2 s turn, the waiter's
    # span), never a fixed wall-clock figure, so it holds on a loaded machine.
    with ThreadPoolExecutor(max_workers=2) as pool:
        holder = pool.submit(timed_post, one_waits, noul(f"{SLOW_MARK} first"))
        await_health(one_waits, lambda h: h["busy"])
        waiter = pool.submit(timed_post, one_waits, noul(f"{SLOW_MARK} second"))
        await_health(one_waits, lambda h: h["serving"]["waiting"] == 1)
        seen_waiting = time.monotonic()
        refused = post(one_waits, noul("one request too many"))
        refused_at = time.monotonic()
        (held, held_sent, held_end), (waited, waiter_sent, waiter_end) = holder.result(), waiter.result()
    assert refused.status_code == 503
    assert refused_at < held_end  # at once: answered while the holder still held the model, not after a wait in line
    error = refused.json()["error"]
    assert error["type"] == "queue_full" and "--max-queue" in error["message"]
    assert int(refused.headers["Retry-After"]) >= 1 and int(refused.headers["Retry-After-Ms"]) >= 1
    assert "X-Queue-Time-Ms" not in refused.headers  # it never reached the model
    assert held.status_code == 200 and waited.status_code == 200
    # The waiter took the model when the holder let go: it was in line by `seen_waiting` and the holder's
    # turn (HOLD_S) began after `held_sent`, so it waited at least the difference (however loaded the
    # machine); its queue time lies inside its own span less its own turn.
    queue_ms = float(waited.headers["X-Queue-Time-Ms"])
    assert queue_ms >= (held_sent + HOLD_S - seen_waiting) * 1000 - 1
    assert queue_ms <= (waiter_end - waiter_sent - HOLD_S) * 1000 + 1
    state = serving(one_waits)
    assert state["refused"] == 1 and state["waiting"] == 0 and state["max_queue"] == 1
    assert post(one_waits, noul()).status_code == 200  # a place again once the queue drained


# ------------------------------------------------------------------ order, answers, headers

def test_waiting_requests_take_the_model_in_arrival_order(default_queue) -> None:
    with ThreadPoolExecutor(max_workers=5) as pool:
        before = serving(default_queue)["admitted"]
        futures: list[Future] = []
        seen: list[float] = []  # when /health showed each one admitted (it was read whole by then)
        for number in range(5):  # each sent once the one before it is admitted
            futures.append(pool.submit(timed_post, default_queue, noul(f"{SLOW_MARK} {number}")))
            await_health(default_queue, lambda h, n=number: h["serving"]["admitted"] > before + n)
            seen.append(time.monotonic())
        results = [future.result() for future in futures]
    assert all(response.status_code == 200 for response, _, _ in results)
    ends = [end for _, _, end in results]
    assert ends == sorted(ends)  # each holds the model TURN_S: the order of the ends is the order of turns
    # By the requests' own clocks: the one before began its turn after it was sent and held the model
    # TURN_S; this one was in line by `seen`, so it waited at least the difference (however loaded).
    waits = [(float(response.headers["X-Queue-Time-Ms"]), results[k][1] + TURN_S - seen[k + 1])
             for k, (response, _, _) in enumerate(results[1:])]
    assert any(least > 0 for _, least in waits)  # the line formed: one was in line mid-turn of the one before
    for queue_ms, least in waits:
        assert queue_ms >= max(0.0, least * 1000 - 1)


def test_concurrent_clients_get_the_answers_of_sequential_ones(default_queue) -> None:
    bodies = [noul(f"Request {number}: the meeting is on {day}.") for number, day in
              enumerate(["Monday", "Tuesday", "Friday", "a holiday"] * 3)]
    alone = [post(default_queue, body) for body in bodies]
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        together = list(pool.map(lambda body: post(default_queue, body), bodies))
    for one, other in zip(alone, together, strict=True):
        assert one.status_code == other.status_code == 200
        assert one.json()["answers"] == other.json()["answers"]  # nothing batched: bit-identical answers
        assert set(other.json()) == BODY_KEYS and "queue" not in other.text.lower()  # the header, not the body
        assert float(other.headers["X-Queue-Time-Ms"]) >= 0
    # They were concurrent: one of them waited at least the whole inference of another.
    waited_ms = max(float(response.headers["X-Queue-Time-Ms"]) for response in together)
    assert waited_ms >= 1000 * min(response.json()["metadata"]["inference_seconds"] for response in together)
    state = serving(default_queue)
    assert state.pop("admitted") >= 2 * len(bodies)
    assert state == {"workers": 1, "batching": False, "order": "arrival", "max_queue": 32, "waiting": 0,
                     "refused": 0, "queue_time_header": "X-Queue-Time-Ms"}


def test_an_idle_server_reports_a_short_queue_time(default_queue) -> None:
    response, sent, ended = timed_post(default_queue, noul())
    # short by the request's own clock: a small part of its span (which includes its inference)
    assert response.status_code == 200 and 0 <= float(response.headers["X-Queue-Time-Ms"]) < (ended - sent) * 1000 / 2
    invalid = post(default_queue, {"model": "open-jev", "state": "x", "questions": {}})
    assert invalid.status_code == 422 and "X-Queue-Time-Ms" not in invalid.headers  # refused before its turn


# ------------------------------------------------------------------ the flag

@pytest.mark.parametrize("value", ["-1", "1000001"])
def test_max_queue_out_of_range_is_one_error_line(start_server, fixture_checkpoint: Path, value: str) -> None:
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--max-queue", value])
    assert server.proc.wait(timeout=60) == 2
    assert server.log.read_text().strip().splitlines() == ["error: --max-queue must be in [0, 1000000]."]

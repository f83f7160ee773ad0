"""Load levels against real loopback HTTP servers: closed-loop connections really run at once,
and open-loop latency is measured from the schedule, so a server stall is not hidden."""

from __future__ import annotations

import itertools
import json
import statistics
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from openjev_repro.evidence.recipe import Load, LoadLevel
from openjev_repro.evidence.rows import RowWriter, read_rows
from openjev_repro.study.load_levels import (
    ArrivalStream,
    LevelConnections,
    arrival_offsets_ns,
    connection_count,
    merged_connections,
    run_level_pass,
)
from openjev_repro.study.passes import PassRunner, ResponseLog
from openjev_repro.study.timed_client import TimedClient
from openjev_repro.study.workload import Request

ANSWER = json.dumps({"answers": {"q": {"type": "noul", "noul": 0.75}}, "usage": {"input_tokens": 7}}).encode()
STALL_S = 1.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, behave) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behave = behave  # called with the request number before answering


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        number = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["n"]
        queued = self.server.behave(number)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.send_header("X-Queue-Time-Ms", f"{queued:.3f}")
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args) -> None:
        pass


def _serve(behave):
    server = _Server(behave)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _requests(count: int) -> list[Request]:
    return [Request(id=f"case-{i}", body=json.dumps({"n": i}).encode(), label="yes") for i in range(count)]


def _runner(tmp_path, server) -> PassRunner:
    host, port = server.server_address[:2]
    return PassRunner("b", TimedClient(host, port), "/v1/systemone", RowWriter(tmp_path / "rows.jsonl"),
                      ResponseLog(tmp_path / "responses.jsonl"), alive=lambda: True)


def _connections(server, count: int) -> LevelConnections:
    host, port = server.server_address[:2]
    return LevelConnections(lambda: TimedClient(host, port, timeout_s=10), count)


def test_levels_run_in_order_and_are_named():
    load = Load(closed=[4, 1, 2], open={"rates_per_s": [20.0, 2.5], "arrivals": "fixed"})
    assert [lv.id for lv in load.levels()] == ["closed-c1", "closed-c2", "closed-c4", "open-r2.5", "open-r20"]


def test_arrivals_are_seeded_and_fixed_arrivals_are_evenly_spaced():
    poisson = LoadLevel("open-r20", "open", rate_per_s=20.0, arrivals="poisson", seed=7)
    first = arrival_offsets_ns(poisson, 2000)
    assert first == arrival_offsets_ns(poisson, 2000) and first[0] == 0
    assert first != arrival_offsets_ns(LoadLevel("open-r20", "open", rate_per_s=20.0, arrivals="poisson", seed=8), 2000)
    assert statistics.mean(b - a for a, b in itertools.pairwise(first)) == pytest.approx(5e7, rel=0.1)
    fixed = LoadLevel("open-r20", "open", rate_per_s=20.0, arrivals="fixed")
    assert arrival_offsets_ns(fixed, 4) == [0, 50_000_000, 100_000_000, 150_000_000]
    assert connection_count(fixed, 100) == 20 and connection_count(fixed, 3) == 3
    assert connection_count(LoadLevel("open-r1", "open", rate_per_s=1.0, arrivals="fixed"), 100) == 8


def test_a_closed_level_of_two_keeps_two_requests_in_flight(tmp_path):
    # The server answers the first two requests only once both have arrived: a client that sends
    # one at a time would leave the barrier waiting, and the pass would fail.
    both = threading.Barrier(2, timeout=5)

    def behave(number):
        if number < 2:
            both.wait()
        return 0.5

    server = _serve(behave)
    runner = _runner(tmp_path, server)
    level = LoadLevel("closed-c2", "closed", concurrency=2)
    with _connections(server, 2) as connections:
        rows = run_level_pass(runner, connections, level, _requests(10), workload="w", phase="measured", index=3)
    runner.rows.close()
    assert sorted(r.seq for r in rows) == list(range(10)) and all(r.ok for r in rows)
    assert {r.connection for r in rows} == {0, 1} and {r.level for r in rows} == {"closed-c2"}
    assert all(r.scheduled_ns is None and r.server_queue_ms == 0.5 and r.pass_index == 3 for r in rows)
    assert sorted(read_rows(tmp_path / "rows.jsonl"), key=lambda r: r.seq) == sorted(rows, key=lambda r: r.seq)
    assert merged_connections(connections.clients)["connections_opened"] == 2
    server.shutdown()


def _stalling_server():
    serving = threading.Lock()  # one request at a time, like a single-worker server

    def behave(number):
        with serving:
            if number == 5:
                threading.Event().wait(STALL_S)  # the server's stall (its behaviour, not the test's wait)
        return 0.0

    return _serve(behave)


def _scheduled_during_stall(rows):
    """The rows scheduled while request 5 stalled the server (but not in its last 100 ms), and the stall's end."""
    by_seq = {r.seq: r for r in rows}
    start, end = by_seq[5].scheduled_ns, by_seq[5].end_ns
    return [r for r in rows if start < r.scheduled_ns < end - 100_000_000], end


@pytest.mark.slow  # waits out a 2 s server stall
def test_a_server_stall_raises_the_latency_of_every_request_scheduled_during_it(tmp_path):
    """No coordinated omission: request 5 stalls the (one-at-a-time) server for 1 s; the two senders
    are stuck, so the requests due during the stall go out late. Measured from their schedule they
    carry the stall; measured from their actual send (what a closed-loop client reports) they would not."""
    server = _stalling_server()
    runner = _runner(tmp_path, server)
    level = LoadLevel("open-r20", "open", rate_per_s=20.0, arrivals="fixed")
    with _connections(server, 2) as connections:
        rows = run_level_pass(runner, connections, level, _requests(40), workload="w", phase="measured", index=1)
    runner.rows.close()
    server.shutdown()
    assert sorted(r.seq for r in rows) == list(range(40)) and {(r.ok, r.level) for r in rows} == {(True, "open-r20")}
    during, stall_end = _scheduled_during_stall(rows)
    assert len(during) >= 15  # 20/s for about a second
    # each waited until the stall ended (request 5's answer, give or take its sending)
    assert min(r.from_schedule_ns - (stall_end - r.scheduled_ns) for r in during) >= -20_000_000
    assert statistics.median(r.from_schedule_ns for r in during) > 0.3e9
    assert statistics.median(r.latency_ns for r in during) < 0.1e9  # what coordinated omission would report
    assert sum(r.late_ns > 50_000_000 for r in during) >= len(during) - 2  # the rows say the schedule slipped
    assert max(r.from_schedule_ns for r in rows if r.seq < 5) < 0.2e9


def test_a_levels_passes_continue_one_schedule_so_a_stall_across_a_pass_boundary_is_recorded(tmp_path):
    """Issue 41 item 8: the second pass of a level takes the next times of the level's one schedule, not a
    schedule restarted after the first pass's last response. The last request of pass 1 stalls the server
    for 1 s; the first requests of pass 2 were due during that stall, so they go out late and their latency
    from the schedule carries it (a restarted schedule would have begun after the stall and recorded none)."""
    serving = threading.Lock()

    def behave(number):
        with serving:
            if number == 9:
                threading.Event().wait(STALL_S)
        return 0.0

    server = _serve(behave)
    runner = _runner(tmp_path, server)
    level = LoadLevel("open-r20", "open", rate_per_s=20.0, arrivals="fixed")
    with _connections(server, 2) as connections:
        first = run_level_pass(runner, connections, level, _requests(10), workload="w", phase="measured", index=1)
        second = run_level_pass(runner, connections, level, _requests(20), workload="w", phase="measured", index=2)
    runner.rows.close()
    server.shutdown()
    stall_end = max(r.end_ns for r in first)
    due = sorted(r.scheduled_ns for r in first + second)
    assert all(b - a == 50_000_000 for a, b in itertools.pairwise(due))  # one schedule, 20/s, across both passes
    during = [r for r in second if r.scheduled_ns < stall_end - 100_000_000]
    assert len(during) >= 15  # about a second of arrivals at 20/s, all recorded in pass 2
    assert all(r.late_ns > 50_000_000 and r.from_schedule_ns > r.latency_ns for r in during)
    assert statistics.median(r.from_schedule_ns for r in during) > 0.3e9


def test_an_arrival_stream_continues_where_a_pass_left_off():
    poisson = LoadLevel("open-r20", "open", rate_per_s=20.0, arrivals="poisson", seed=7)
    stream = ArrivalStream(poisson)
    assert stream.take(5) + stream.take(7) == arrival_offsets_ns(poisson, 12)


def test_an_interrupt_before_every_sender_started_is_the_interrupt(tmp_path, monkeypatch):
    """Ctrl-C while a level's senders are being started (the second has not started): the pass stops the first
    and raises the KeyboardInterrupt itself, not 'cannot join thread before it is started' (which a study beside
    another make test recorded as its error instead of Ctrl-C)."""
    from openjev_repro.study import load_levels

    started: list[threading.Thread] = []

    class InterruptedOnSecondStart(threading.Thread):
        def start(self) -> None:
            if self.name.startswith("load-"):  # a level's sender (the server's threads start as always)
                if started:
                    raise KeyboardInterrupt
                started.append(self)
            super().start()

    server = _serve(lambda number: 0.0)
    runner = _runner(tmp_path, server)
    level = LoadLevel("closed-c2", "closed", concurrency=2)
    with _connections(server, 2) as connections, pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(load_levels.threading, "Thread", InterruptedOnSecondStart)  # the senders only, from here
        run_level_pass(runner, connections, level, _requests(10), workload="w", phase="measured", index=1)
    monkeypatch.undo()
    runner.rows.close()
    assert len(started) == 1 and not started[0].is_alive()
    server.shutdown()

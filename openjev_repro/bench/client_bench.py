"""How much latency the timed client adds: raw socket vs TimedClient (h11) vs the hand-written
framing it replaced vs httpx, one run.

All clients talk to the same `LoopbackServer` (its own process) over their own keep-alive
connection, alternating request by request (each round takes the next of all orders of the
clients) so that drift in the machine's load and cache effects touch all of them alike. Latencies:

    raw-socket          sendall of prebuilt bytes, recv_into until the known length: the floor
    timed-client        TimedClient's own end_ns - start_ns: what a study records
    timed-client-wall   the same calls timed around `request()`: adds building the request,
                        announcing it to h11, and decoding after the clock, which a study
                        never counts
    handwritten-framing       the same for `HandwrittenFramingClient`, the `bytes.find`
    handwritten-framing-wall  framing TimedClient used before h11 (the comparison for h11)
    httpx               httpx.Client().post(...) timed around the call, default settings

Every response body's SHA256 must equal the raw socket's, so speed is not bought with a
wrong answer.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import socket
import time
from collections.abc import Callable

import httpx
import msgspec

from ..errors import BackendError
from ..study.timed_client import TimedClient, build_request
from .handwritten_client import HandwrittenFramingClient
from .loopback_server import SYSTEMONE_REQUEST, LoopbackServer
from .machine import BenchResult
from .stats import Latencies, summarize_ns

__all__ = ["ClientBenchResult", "run_client_bench"]

_ns = time.monotonic_ns
_SERIES = ("raw-socket", "timed-client", "timed-client-wall", "handwritten-framing", "handwritten-framing-wall", "httpx")
# A call sends one request and returns ([(series, latency_ns), ...], body).
Call = Callable[[], tuple[list[tuple[str, int]], bytes]]


def _raw_socket(port: int, wire: bytes, response_len: int, body_len: int) -> tuple[Call, socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(response_len)
    view = memoryview(buf)

    def call() -> tuple[list[tuple[str, int]], bytes]:
        got = 0
        start = _ns()
        sock.sendall(wire)
        while got < response_len:
            n = sock.recv_into(view[got:])
            if not n:
                raise BackendError("the loopback benchmark server closed the connection mid-response.")
            got += n
        end = _ns()
        return [("raw-socket", end - start)], bytes(buf[response_len - body_len :])

    return call, sock


def _timed(client: TimedClient, series: str) -> Call:
    headers = {"Content-Type": "application/json"}
    wall = f"{series}-wall"

    def call() -> tuple[list[tuple[str, int]], bytes]:
        start = _ns()
        r = client.request("POST", "/v1/systemone", SYSTEMONE_REQUEST, headers)
        end = _ns()
        return [(series, r.end_ns - r.start_ns), (wall, end - start)], r.body

    return call


def _httpx(client: httpx.Client, url: str) -> Call:
    headers = {"Content-Type": "application/json"}

    def call() -> tuple[list[tuple[str, int]], bytes]:
        start = _ns()
        r = client.post(url, content=SYSTEMONE_REQUEST, headers=headers)
        end = _ns()
        return [("httpx", end - start)], r.content

    return call


class ClientFigures(Latencies, frozen=True, kw_only=True):
    """One series' latencies, and its median over the raw socket's."""

    p50_ratio_to_raw: float


class ClientBenchResult(BenchResult, frozen=True, kw_only=True):
    """bench-results/client.json."""

    h11_cost_p50_over_raw_p50: float
    requests_per_client: int
    warmup_per_client: int
    request_bytes: int
    response_bytes: int
    body_sha256: str
    timed_client_connections_opened: int
    handwritten_framing_connections_opened: int
    clients: dict[str, ClientFigures]

    def table(self) -> str:
        rows = [f"{'client':<26}{'n':>7}{'p50 µs':>10}{'p99 µs':>10}{'mean µs':>10}{'p50/raw':>9}"]
        rows += [f"{name:<26}{s.n:>7}{s.p50_us:>10.1f}{s.p99_us:>10.1f}{s.mean_us:>10.1f}{s.p50_ratio_to_raw:>9.2f}"
                 for name, s in self.clients.items()]
        return "\n".join([
            *rows,
            (f"connections opened: timed client {self.timed_client_connections_opened}, "
             f"hand-written framing {self.handwritten_framing_connections_opened}"),
            f"handwritten-framing/raw-socket p50 ratio: {self.clients['handwritten-framing'].p50_ratio_to_raw:.2f}",
            f"h11 cost: (timed-client - handwritten-framing) p50 / raw-socket p50: {self.h11_cost_p50_over_raw_p50:+.3f}",
            f"timed-client/raw-socket p50 ratio: {self.clients['timed-client'].p50_ratio_to_raw:.2f}"])


def run_client_bench(n: int = 2000, warmup: int = 200, progress: Callable[[int], None] | None = None) -> ClientBenchResult:
    """Measure every client `n` times after `warmup` untimed rounds; return the result record."""
    header = BenchResult.header("client")
    with LoopbackServer() as server:
        host = f"127.0.0.1:{server.port}"
        wire = build_request("POST", "/v1/systemone", host, SYSTEMONE_REQUEST, {"Content-Type": "application/json"})
        raw, raw_sock = _raw_socket(server.port, wire, len(server.response), len(server.body))
        timed_client = TimedClient("127.0.0.1", server.port, timeout_s=10)
        handwritten = HandwrittenFramingClient("127.0.0.1", server.port, timeout_s=10)
        hx = httpx.Client()
        calls = [
            raw,
            _timed(timed_client, "timed-client"),
            _timed(handwritten, "handwritten-framing"),
            _httpx(hx, f"http://{host}/v1/systemone"),
        ]
        try:
            samples, digests = _alternate(calls, n, warmup, progress)
        finally:
            raw_sock.close()
            timed_client.close()
            handwritten.close()
            hx.close()
        connections = timed_client.connections_opened
        handwritten_connections = handwritten.connections_opened
    expected = hashlib.sha256(server.body).hexdigest()
    if digests != {expected}:
        raise AssertionError(f"response bodies differ between clients: {sorted(digests)} vs server {expected}")
    stats = {name: summarize_ns(samples[name]) for name in _SERIES}
    floor = stats["raw-socket"].p50_us
    # What h11 costs inside the clock, in units of the floor: the issue-15 rule keeps the
    # hand-written framing only if this exceeds 0.1.
    h11_cost = (stats["timed-client"].p50_us - stats["handwritten-framing"].p50_us) / floor
    return ClientBenchResult(
        **header, h11_cost_p50_over_raw_p50=round(h11_cost, 3), requests_per_client=n, warmup_per_client=warmup,
        request_bytes=len(wire), response_bytes=len(server.response), body_sha256=expected,
        timed_client_connections_opened=connections, handwritten_framing_connections_opened=handwritten_connections,
        clients={name: ClientFigures(**msgspec.structs.asdict(s), p50_ratio_to_raw=round(s.p50_us / floor, 3))
                 for name, s in stats.items()})


def _alternate(
    calls: list[Call], n: int, warmup: int, progress: Callable[[int], None] | None
) -> tuple[dict[str, list[int]], set[str]]:
    samples: dict[str, list[int]] = {}
    digests: set[str] = set()
    # Every order in turn (24 for four clients): each client follows each other equally often.
    # (Plain rotation keeps the cyclic order, so one client would always follow httpx and its
    # cold caches.)
    orders = list(itertools.permutations(calls))
    gc.collect()
    for i in range(warmup + n):
        for call in orders[i % len(orders)]:
            points, body = call()
            digests.add(hashlib.sha256(body).hexdigest())
            if i >= warmup:
                for name, latency in points:
                    samples.setdefault(name, []).append(latency)
        if progress is not None and i >= warmup:
            progress(1)
    return samples, digests

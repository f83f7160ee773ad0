"""Client overhead calibration, recorded in every study before the first backend starts.

It measures the TimedClient against our own no-op loopback endpoint (a `LoopbackServer` in a
child process returning a fixed ~600-byte /v1/systemone-shaped body): the latency floor of the
measurement path on this host, so a report can say how much of a backend's latency could be
client and loopback.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from ..study.timed_client import TimedClient, build_request
from .loopback_server import SYSTEMONE_REQUEST, LoopbackServer
from .stats import summarize_ns

__all__ = ["calibrate_client_overhead"]

_WARMUP = 50


def calibrate_client_overhead(n: int = 500) -> dict[str, Any]:
    """Time `n` requests (after a warm-up of 50) of TimedClient against a no-op loopback server.

    Returns {"n", "p50_us", "p99_us", "mean_us", "min_us", "connections_opened",
    "load_average_1m", "method"}.
    Takes well under a second on an idle machine (most of it starting the server process).
    """
    with LoopbackServer() as server, TimedClient("127.0.0.1", server.port, timeout_s=10) as client:
        wire = build_request(
            "POST", "/v1/systemone", f"127.0.0.1:{server.port}", SYSTEMONE_REQUEST, {"Content-Type": "application/json"}
        )
        latencies = []
        for i in range(_WARMUP + n):
            r = client.send_prepared(wire)
            if r.body != server.body:
                raise AssertionError("the calibration server answered with unexpected bytes")
            if i >= _WARMUP:
                latencies.append(r.end_ns - r.start_ns)
        connections = client.connections_opened
    return {
        **msgspec.to_builtins(summarize_ns(latencies)),
        "connections_opened": connections,
        "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the host inflates p50/p99
        "method": (
            f"TimedClient POST /v1/systemone ({len(wire)} request bytes) to a no-op HTTP/1.1 server in a "
            f"child process on 127.0.0.1 answering {len(server.response)} bytes; {n} requests after "
            f"{_WARMUP} warm-up on one keep-alive connection; latency = end_ns - start_ns (monotonic)"
        ),
    }

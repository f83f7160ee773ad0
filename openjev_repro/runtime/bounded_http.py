"""One HTTP GET with a wall-clock deadline over the whole exchange (connect, send, every byte back).

urllib's `timeout` bounds each socket call, so a server trickling one byte per second keeps
a GET alive for ever; readiness polls use this instead: the deadline ends the exchange, however
the bytes arrive. The response is parsed by h11 and capped at `max_bytes`.
"""

from __future__ import annotations

import socket
import time

import h11

__all__ = ["HttpDeadline", "get_within", "request_within"]


class HttpDeadline(OSError):
    """The exchange did not finish before its deadline (an OSError, like a socket timeout)."""


def get_within(host: str, port: int, path: str, seconds: float, max_bytes: int = 1 << 20) -> tuple[int, bytes]:
    """(status, body) of `GET path`, or HttpDeadline once `seconds` have passed since the call."""
    return request_within(host, port, path, seconds, body=None, max_bytes=max_bytes)


def request_within(host: str, port: int, path: str, seconds: float, *, body: bytes | None,
                   max_bytes: int = 1 << 20, headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes]:
    """(status, body) of `GET path` (body None) or a JSON `POST path`, within `seconds` over the whole exchange."""
    deadline = time.monotonic() + seconds
    with socket.create_connection((host, port), timeout=max(seconds, 1e-3)) as sock:
        parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_bytes)
        hostname = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        fields = [("Host", hostname), ("Connection", "close"), *headers]
        if body is not None:
            fields += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        request = h11.Request(method="GET" if body is None else "POST", target=path, headers=fields)
        out = parser.send(request) + (parser.send(h11.Data(data=body)) if body else b"")
        sock.sendall(out + parser.send(h11.EndOfMessage()))
        return _read(sock, parser, deadline, max_bytes)


def _read(sock: socket.socket, parser: h11.Connection, deadline: float, max_bytes: int) -> tuple[int, bytes]:
    status, body = 0, bytearray()
    while True:
        event = parser.next_event()
        if event is h11.NEED_DATA:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HttpDeadline("no complete answer before the deadline")
            sock.settimeout(left)
            try:
                parser.receive_data(sock.recv(65536))
            except TimeoutError:
                raise HttpDeadline("no complete answer before the deadline") from None
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_bytes:
                raise HttpDeadline(f"the answer is longer than {max_bytes} bytes")
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return status, bytes(body)

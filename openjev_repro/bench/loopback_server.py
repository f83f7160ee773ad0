"""A minimal loopback HTTP/1.1 server answering every request with one fixed response.

It runs in its own process (`LoopbackServer` starts `python -m openjev_repro.bench.loopback_server`)
so that it does not share the GIL with the clients it serves. It reads each request with a
`recv_into` loop, frames it by Content-Length, and answers with one prebuilt `sendall`:
as little server time as possible, so client differences stand out.

The default body is a synthetic /v1/systemone response of about 600 bytes with the shape of
the HTTP contract (made-up values; no JevBench content).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
from types import TracebackType
from typing import Self

from ..decision import TEMPERATURE_27B
from ..errors import BackendError

__all__ = ["SYSTEMONE_REQUEST", "SYSTEMONE_RESPONSE", "LoopbackServer", "fixed_response", "main", "serve"]

SYSTEMONE_RESPONSE: bytes = json.dumps(
    {
        "model": "open-jev",
        "answers": {
            "q": {"type": "noul", "noul": 0.8731945157051086},
            "q2": {"type": "noul", "noul": 0.1268054842948914},
        },
        "usage": {"input_tokens": 1234, "output_tokens": 0},
        "metadata": {
            "method": "hf-transformers",
            "temperature": TEMPERATURE_27B,
            "candidate_sequences": 1,
            "inference_seconds": 0.041275,
            "prefix_cache": False,
            "checkpoint_sha256": "5" * 64,
            "base_revision": "1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0",
            "max_length": 16384,
            "backbone_parameter_dtypes": ["bfloat16"],
            "code_commit": "3308a15ccd7eea1df7a37d6ddc39b023b801ba16",
        },
    },
    separators=(",", ":"),
).encode()

# A synthetic request body of the contract's shape (no JevBench content).
SYSTEMONE_REQUEST: bytes = json.dumps(
    {
        "model": "open-jev",
        "state": {"screen": "A settings dialog with a checkbox labelled 'Enable sync'.", "step": 3},
        "questions": {"q": {"type": "noul", "instructions": "Is the sync checkbox checked?"}},
    },
    separators=(",", ":"),
).encode()


def fixed_response(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def _content_length(head: bytes) -> int:
    i = head.find(b"\r\ncontent-length:")
    if i < 0:
        return 0
    j = head.find(b"\r\n", i + 2)
    return int(head[i + 17 : j if j >= 0 else len(head)])


class _Connection:
    """One client connection's receive buffer."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)
        self.filled = 0

    def on_readable(self, response: bytes) -> bool:
        """Receive what arrived and answer every complete request; False once the peer closed."""
        n = self.sock.recv_into(self.view[self.filled :])
        if not n:
            return False
        self.filled += n
        while (head_end := self.buf.find(b"\r\n\r\n", 0, self.filled)) >= 0:
            end = head_end + 4 + _content_length(bytes(self.buf[:head_end]).lower())
            if self.filled < end:
                break
            self.sock.sendall(response)
            self.buf[: self.filled - end] = self.buf[end : self.filled]  # a pipelined next request
            self.filled -= end
        return True


def serve(port: int = 0, body: bytes = SYSTEMONE_RESPONSE) -> None:
    """Serve forever on 127.0.0.1:port from one thread; print `listening PORT` once ready.

    One thread and one epoll loop for every connection, so every client meets the same
    wake-up path (a thread per connection made latency depend on which core each landed).
    """
    response = fixed_response(body)
    listener = socket.create_server(("127.0.0.1", port))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    print(f"listening {listener.getsockname()[1]}", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data is None:
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, _Connection(conn))
            elif not key.data.on_readable(response):
                selector.unregister(key.fileobj)
                key.data.sock.close()


def _exit_with_parent() -> None:
    """Stop when stdin reaches EOF: the parent closed it or died, so nobody needs us."""
    sys.stdin.read()
    os._exit(0)


class LoopbackServer:
    """Run `serve` in a child process for the duration of a `with` block."""

    def __init__(self, body: bytes = SYSTEMONE_RESPONSE) -> None:
        self.body = body
        self.response = fixed_response(body)
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from openjev_repro.bench.loopback_server import main; main()", "--body-hex", self.body.hex()],
            stdin=subprocess.PIPE,  # closed when we exit, however we exit: the server follows
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("listening "):
            self._proc.kill()
            self._proc.wait()
            raise BackendError(
                f"the loopback benchmark server did not start (it printed {line!r}); "
                "run `python -m openjev_repro.bench.loopback_server` to see why."
            )
        self.port = int(line.split()[1])
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m openjev_repro.bench.loopback_server",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--body-hex", default=SYSTEMONE_RESPONSE.hex())
    args = parser.parse_args(argv)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    try:
        serve(args.port, bytes.fromhex(args.body_hex))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

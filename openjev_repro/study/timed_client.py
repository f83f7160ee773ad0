"""A timed HTTP/1.1 client over one persistent raw socket.

Why not httpx: every microsecond the client spends between "start" and "end" is added to the
latency a study reports. Here the request bytes are built before the clock starts, the timed
path is `sendall` plus a `recv_into` loop over one reusable buffer (framing is found with
`bytes.find`, never per byte), and headers, trailers and the body are decoded after the clock
stops. `docs/benchmarks.md` gives the measured overhead against a raw-socket floor.

What is timed: `start_ns` is `time.monotonic_ns()` just before `sendall`; `end_ns` is taken
right after the `recv_into` call that delivered the response's last byte (each recv is
stamped; framing that follows it is not counted). Connecting (and reconnecting) happens before
`start_ns` and is never inside a measurement; `connections_opened` counts it so a caller can
show that one connection served every request.

Errors (all `ReproError`s, so a runner can record them as failure rows):

    BackendError
    └── ClientError       could not connect, connection reset or closed mid-response
        └── ClientTimeout no byte arrived for `timeout_s`
    ProtocolError
    └── MalformedResponse the bytes are not a valid HTTP/1.1 response

A request whose bytes may have reached the server is never sent again: a stale keep-alive
connection is detected (readable while idle) and replaced before sending; any failure after
`sendall` started raises instead of retrying.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Mapping

from ..errors import BackendError, ProtocolError

__all__ = [
    "TimedClient",
    "TimedResponse",
    "ClientError",
    "ClientTimeout",
    "MalformedResponse",
    "build_request",
]

_monotonic_ns = time.monotonic_ns
_BUFFER_BYTES = 64 * 1024
_NO_BODY_STATUSES = frozenset((204, 304))

# Where one response lies in the receive buffer: message start, header end, body spans,
# trailer span (or None), end of the response, bytes received, framed by EOF.
_Frame = tuple[int, int, list[tuple[int, int]], tuple[int, int] | None, int, int, bool]


class ClientError(BackendError):
    """The backend could not be reached, or the connection broke during a request."""


class ClientTimeout(ClientError):
    """The backend sent nothing for the client's timeout."""


class MalformedResponse(ProtocolError):
    """The backend's bytes are not a valid HTTP/1.1 response."""


@dataclass(frozen=True, slots=True)
class TimedResponse:
    """One response as received. Header and trailer names are lower-case."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    start_ns: int
    end_ns: int
    trailers: dict[str, str] = field(default_factory=dict)

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns


def build_request(
    method: str,
    path: str,
    host: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """The exact bytes of one HTTP/1.1 request (request line, headers, body)."""
    method = method.upper()
    if not method.isalpha():
        raise ClientError(f"HTTP method {method!r} is not a token; use e.g. GET or POST.")
    if not path.startswith("/") or any(c in path for c in " \r\n"):
        raise ClientError(f"request path {path!r} must start with '/' and contain no spaces or line breaks.")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    given = {k.lower() for k in (headers or {})}
    for name, value in (headers or {}).items():
        if any(c in f"{name}{value}" for c in "\r\n") or ":" in name or not name:
            raise ClientError(f"header {name!r}: {value!r} contains a line break or a bad name.")
        lines.append(f"{name}: {value}")
    if "content-length" not in given and (body or method in ("POST", "PUT", "PATCH")):
        lines.append(f"Content-Length: {len(body)}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    except UnicodeEncodeError as exc:
        raise ClientError(f"request line or headers contain {exc.object[exc.start:exc.end]!r}, which HTTP/1.1 cannot carry; percent-encode it.") from None


class TimedClient:
    """One keep-alive HTTP/1.1 connection to `host:port`, timing each request.

    `timeout_s` bounds connecting, sending, and each wait for more response bytes (a
    kernel limit per socket call, SO_RCVTIMEO/SO_SNDTIMEO).
    """

    def __init__(self, host: str, port: int, timeout_s: float = 60.0) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.connections_opened = 0
        self._host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._sock: socket.socket | None = None
        self._poll: select.poll | None = None
        self._buf = bytearray(_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._received_ns = 0

    # -- public -----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> TimedResponse:
        """Send one request and return its response with client-side timestamps."""
        wire = build_request(method, path, self._host_header, body, headers)
        return self.send_prepared(wire, head=method.upper() == "HEAD")

    def send_prepared(self, wire: bytes, *, head: bool = False) -> TimedResponse:
        """Send request bytes made by `build_request` (pass `head=True` for a HEAD request)."""
        sock = self._ready_socket()
        try:
            start = _monotonic_ns()
            sock.sendall(wire)
            frame = self._receive(sock, head)
            end = self._received_ns
        except (TimeoutError, BlockingIOError) as exc:
            self._discard()
            raise ClientTimeout(
                f"{self._host_header} sent nothing for {self.timeout_s:g} s during a request; "
                "the backend is stuck or overloaded (the request was not retried)."
            ) from exc
        except OSError as exc:
            self._discard()
            raise ClientError(
                f"the connection to {self._host_header} failed during a request: "
                f"{exc.strerror or exc}; the request was not retried."
            ) from exc
        except BaseException:  # our own errors, or an interrupt: the stream is mid-response
            self._discard()
            raise
        try:
            return self._finish(frame, start, end)
        except MalformedResponse:
            self._discard()
            raise

    def close(self) -> None:
        self._discard()

    def __enter__(self) -> TimedClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- connection -------------------------------------------------------------------------

    def _ready_socket(self) -> socket.socket:
        """The open connection, or a new one if there is none or the idle one went stale."""
        if self._sock is not None and self._poll is not None and self._poll.poll(0):
            # Readable while idle means the peer closed it (or sent stray bytes): unusable.
            self._discard()
        if self._sock is None:
            self._connect()
        assert self._sock is not None
        return self._sock

    def _connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except TimeoutError as exc:
            raise ClientTimeout(
                f"connecting to {self._host_header} took longer than {self.timeout_s:g} s; "
                "is the backend up and the address right?"
            ) from exc
        except OSError as exc:
            raise ClientError(
                f"could not connect to {self._host_header}: {exc.strerror or exc}; "
                "is the backend running and listening there?"
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Time limits in the kernel instead of Python's socket timeout, which would add a
        # poll() before every send and recv inside the timed window. Past the limit a call
        # fails with EAGAIN (BlockingIOError), which send_prepared turns into ClientTimeout.
        sock.settimeout(None)
        limit = _timeval(self.timeout_s)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        self._sock, self._poll = sock, poller
        self.connections_opened += 1

    def _discard(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._poll = None

    # -- the timed path: only framing, no decoding ------------------------------------------

    def _recv(self, sock: socket.socket, filled: int) -> int:
        """Receive more bytes after `filled`; return the new fill level, or -1 at EOF."""
        if filled == len(self._buf):
            self._grow(2 * filled)
        n = sock.recv_into(self._view[filled:])
        self._received_ns = _monotonic_ns()  # the response's end, if these were its last bytes
        return filled + n if n else -1

    def _grow(self, size: int) -> None:
        self._view.release()
        self._buf.extend(bytes(size - len(self._buf)))
        self._view = memoryview(self._buf)

    def _receive(self, sock: socket.socket, head: bool) -> _Frame:
        """Read one response into the buffer and return where its parts lie."""
        buf = self._buf
        filled = msg = 0
        while True:  # status line and headers; interim 1xx responses are skipped
            head_end = buf.find(b"\r\n\r\n", msg, filled)
            if head_end < 0:
                filled = self._recv_or_fail(sock, filled, "before sending a complete header")
                continue
            code = buf[msg + 9 : msg + 12]
            if not (buf.startswith(b"HTTP/1.", msg) and code.isdigit()):
                raise MalformedResponse(
                    f"the response does not start with an HTTP/1.x status line and a three-digit code: "
                    f"{bytes(buf[msg:msg + 40])!r}."
                )
            status = int(code)
            if 100 <= status < 200 and status != 101:
                msg = head_end + 4
                continue
            break
        body_start = head_end + 4
        if head or status in _NO_BODY_STATUSES or 100 <= status < 200:
            return msg, head_end, [], None, body_start, filled, False
        fields = buf[msg:head_end].lower()
        te = _field_value(fields, b"\r\ntransfer-encoding:")
        if te is None:
            length = _field_value(fields, b"\r\ncontent-length:")
        elif te.rsplit(b",", 1)[-1].strip() == b"chunked":
            return self._receive_chunked(sock, msg, head_end, filled)
        else:
            length = None  # another transfer coding: only the server's close ends the body
        if length is None:  # no framing: the body ends when the server closes
            filled = self._receive_to_eof(sock, filled)
            return msg, head_end, [(body_start, filled)], None, filled, filled, True
        try:
            body_end = body_start + int(length)
        except ValueError:
            raise MalformedResponse(f"Content-Length {bytes(length)!r} is not a number.") from None
        if body_end > len(buf):
            self._grow(body_end)
        while filled < body_end:
            filled = self._recv_or_fail(sock, filled, "in the middle of the body", body_start, body_end)
        return msg, head_end, [(body_start, body_end)], None, body_end, filled, False

    def _receive_chunked(self, sock: socket.socket, msg: int, head_end: int, filled: int) -> _Frame:
        buf = self._buf
        pos = head_end + 4
        spans: list[tuple[int, int]] = []
        while True:
            eol = buf.find(b"\r\n", pos, filled)
            if eol < 0:
                filled = self._recv_or_fail(sock, filled, "in the middle of a chunked body")
                continue
            try:
                size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
            except ValueError:
                raise MalformedResponse(f"chunk size line {bytes(buf[pos:eol])[:40]!r} is not hexadecimal.") from None
            data = eol + 2
            if size == 0:
                break
            need = data + size + 2
            if need > len(buf):
                self._grow(max(need, 2 * len(buf)))
                buf = self._buf
            while filled < need:
                filled = self._recv_or_fail(sock, filled, "in the middle of a chunked body")
            if buf[need - 2 : need] != b"\r\n":
                raise MalformedResponse("a chunk is not followed by CRLF; the chunk sizes are wrong.")
            spans.append((data, data + size))
            pos = need
        while True:  # after the last chunk: optional trailer fields, then an empty line
            if filled >= data + 2 and buf[data : data + 2] == b"\r\n":
                return msg, head_end, spans, None, data + 2, filled, False
            end = buf.find(b"\r\n\r\n", data, filled)
            if end >= 0:
                return msg, head_end, spans, (data, end), end + 4, filled, False
            filled = self._recv_or_fail(sock, filled, "in the trailer of a chunked body")

    def _recv_or_fail(self, sock: socket.socket, filled: int, where: str, body_start: int = 0, body_end: int = 0) -> int:
        got = self._recv(sock, filled)
        if got < 0:
            if body_end:
                where = f"after {filled - body_start} of {body_end - body_start} body bytes"
            raise ClientError(f"{self._host_header} closed the connection {where}; the request was not retried.")
        return got

    def _receive_to_eof(self, sock: socket.socket, filled: int) -> int:
        while (got := self._recv(sock, filled)) >= 0:
            filled = got
        return filled

    # -- after the clock: decode ------------------------------------------------------------

    def _finish(self, frame: _Frame, start: int, end: int) -> TimedResponse:
        msg, head_end, spans, trailer_span, used, filled, eof_framed = frame
        buf = self._buf
        lines = bytes(buf[msg:head_end]).decode("latin-1").split("\r\n")
        version, status, reason = _parse_status_line(lines[0])
        headers = _parse_fields(lines[1:])
        trailers = _parse_fields(bytes(buf[slice(*trailer_span)]).decode("latin-1").split("\r\n")) if trailer_span else {}
        if "transfer-encoding" not in headers and len({v.strip() for v in headers.get("content-length", "").split(",")}) > 1:
            raise MalformedResponse(f"conflicting Content-Length values {headers['content-length']!r}.")
        body = bytes(buf[spans[0][0] : spans[0][1]]) if len(spans) == 1 else b"".join(buf[a:b] for a, b in spans)
        connection = headers.get("connection", "").lower()
        keep = (
            not eof_framed
            and "close" not in connection
            and (version == "HTTP/1.1" or "keep-alive" in connection)
            and status != 101
            and filled == used  # stray bytes after the response: do not trust the stream
        )
        if not keep:
            self._discard()
        return TimedResponse(status, reason, headers, body, start, end, trailers)


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("@ll", whole, int((seconds - whole) * 1e6))


def _field_value(fields: bytearray, name: bytes) -> bytearray | None:
    """The first value of a header in the lower-cased header block (name includes CRLF and colon)."""
    i = fields.find(name)
    if i < 0:
        return None
    j = fields.find(b"\r\n", i + 2)
    return fields[i + len(name) : j if j >= 0 else len(fields)].strip()


def _parse_status_line(line: str) -> tuple[str, int, str]:
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    return version, int(code), reason


def _parse_fields(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise MalformedResponse(f"header line {line[:60]!r} is not 'Name: value'.")
        key, value = name.lower(), value.strip()
        fields[key] = f"{fields[key]}, {value}" if key in fields else value
    return fields

"""A timed HTTP/1.1 client over one persistent raw socket, parsed by h11.

Why not httpx: every microsecond the client spends between "start" and "end" is added to the
latency a study reports. Here the request bytes are built, and announced to the parser, before
the clock starts; the timed path is `sendall` plus a `recv_into` loop over one reusable buffer,
each recv's bytes handed to h11 (the sans-IO HTTP/1.1 parser under httpcore and httpx) to learn
whether the response is complete. Headers, trailers and the body are decoded after the clock
stops. `docs/benchmarks.md` gives the measured overhead against a raw-socket floor, beside the
hand-written framing this client used before (`bench/handwritten_client.py`).

What is timed: `start_ns` is `time.monotonic_ns()` just before `sendall`; `end_ns` is taken
right after the `recv_into` call that delivered the response's last byte (each recv is
stamped; parsing that follows it is not counted). Connecting (and reconnecting) happens before
`start_ns` and is never inside a measurement; `connections_opened` counts it so a caller can
show that one connection served every request. `connections()` says how many connections were
opened, how many the server closed (an HTTP/1.0 server, or `Connection: close`, closes after
each response) and which HTTP versions answered; a response that needed a new connection after
an earlier one closed says so (`TimedResponse.reconnected`).

Errors (all `ReproError`s, so a runner can record them as failure rows):

    BackendError
    └── ClientError       could not connect, connection reset or closed mid-response
        └── ClientTimeout the response was not complete `timeout_s` after the request was sent
    ProtocolError
    └── MalformedResponse the bytes are not a valid HTTP/1.1 response (h11 refused them)

A request whose bytes may have reached the server is never sent again: a stale keep-alive
connection is detected (readable while idle) and replaced before sending; any failure after
`sendall` started raises instead of retrying.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self, cast

import h11

from ..errors import BackendError, ProtocolError

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ClientError",
    "ClientTimeout",
    "MalformedResponse",
    "ResponseTooLarge",
    "TimedClient",
    "TimedResponse",
    "build_request",
]

_monotonic_ns = time.monotonic_ns
_BUFFER_BYTES = 64 * 1024
# h11 refuses a header block (or chunk-size line) longer than this while it is incomplete.
_MAX_HEADER_BYTES = 1 << 20
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20  # the recipe's protocol.max_response_bytes

# What h11's refusals mean, in this client's words (h11's own message follows in brackets).
_H11_REFUSALS = (
    ("illegal status line", "the response does not start with an HTTP/1.x status line and a three-digit code"),
    ("no response line", "the response does not start with an HTTP/1.x status line and a three-digit code"),
    ("illegal request line", "the response does not start with an HTTP/1.x status line and a three-digit code"),
    ("bad Content-Length", "Content-Length is not a number"),
    ("conflicting Content-Length", "conflicting Content-Length values"),
    ("illegal header line", "a header line is not 'Name: value'"),
    ("illegal chunk header", "a chunk size line is not hexadecimal"),
    ("malformed chunk footer", "a chunk is not followed by CRLF; the chunk sizes are wrong"),
    ("Receive buffer too long", f"the response's header is longer than {_MAX_HEADER_BYTES} bytes"),
)


class ClientError(BackendError):
    """The backend could not be reached, or the connection broke during a request."""


class ClientTimeout(ClientError):
    """The backend did not answer a request completely within the client's timeout."""


class ResponseTooLarge(ClientError):
    """The answer is larger than the client takes (`max_response_bytes`)."""


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
    reconnected: bool = False  # a new connection was opened for this request after an earlier one closed
    http_version: str = "1.1"  # of the response's status line

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
    if _request_path(path) is None:
        raise ClientError(f"request path {path!r} must start with '/' and contain no spaces or line breaks.")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *_header_lines(headers or {})]
    if (body or method in _BODY_METHODS) and not _has_content_length(headers or {}):
        lines.append(f"Content-Length: {len(body)}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    except UnicodeEncodeError as exc:
        raise ClientError(f"request line or headers contain {exc.object[exc.start:exc.end]!r}, which HTTP/1.1 cannot carry; percent-encode it.") from None


# A request path: '/' first, then no space or line break (what build_request refuses otherwise).
_request_path = re.compile(r"/[^ \r\n]*").fullmatch
_BODY_METHODS = ("POST", "PUT", "PATCH")  # a Content-Length even when the body is empty


def _header_lines(headers: Mapping[str, str]) -> list[str]:
    """'Name: value' lines of the given headers; a line break or a bad name is a ClientError."""
    lines = []
    for name, value in headers.items():
        if any(c in f"{name}{value}" for c in "\r\n") or ":" in name or not name:
            raise ClientError(f"header {name!r}: {value!r} contains a line break or a bad name.")
        lines.append(f"{name}: {value}")
    return lines


def _has_content_length(headers: Mapping[str, str]) -> bool:
    return "content-length" in {k.lower() for k in headers}


class TimedClient:
    """One keep-alive HTTP/1.1 connection to `host:port`, timing each request.

    `timeout_s` bounds connecting, and each request as a whole (first byte sent to last byte
    received, wall clock): a kernel limit per socket call (SO_RCVTIMEO/SO_SNDTIMEO), narrowed to
    the time left when a response takes more than one recv.
    """

    def __init__(self, host: str, port: int, timeout_s: float = 60.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self.connections_opened = 0
        self.closed_by_server = 0  # connections the server closed (after a response, or while idle)
        self.reconnected_requests = 0  # requests that had to open a new connection after an earlier one closed
        self.http_versions: set[str] = set()
        self._reconnected = False  # of the request being sent
        self._host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._sock: socket.socket | None = None
        self._poll: select.poll | None = None
        self._h11: h11.Connection | None = None
        self._view = memoryview(bytearray(_BUFFER_BYTES))
        # The response being received: its head, body pieces and trailers, as h11 gave them.
        self._response: h11.Response | h11.InformationalResponse | None = None
        self._pieces: list[bytes | bytearray] = []
        self._trailers: Iterable[tuple[bytes, bytes]] = ()
        self._limit_changed = False  # SO_RCVTIMEO narrowed to the request's deadline

    # -- public -----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> TimedResponse:
        """Send one request and return its response with client-side timestamps."""
        return self.send_prepared(build_request(method, path, self._host_header, body, headers))

    def send_prepared(self, wire: bytes) -> TimedResponse:
        """Send request bytes made by `build_request` and return the timed response.

        `timeout_s` is a wall-clock deadline for the whole request, from the first byte sent to
        the last byte received: a response trickled byte by byte is cut off at the deadline."""
        opened = self.connections_opened
        sock = self._ready_socket()
        self._reconnected = reconnected = opened > 0 and self.connections_opened > opened
        self.reconnected_requests += reconnected
        self._announce(wire)
        try:
            start = _monotonic_ns()
            sock.sendall(wire)
            end = self._receive(sock, start + int(self.timeout_s * 1e9))
        except (TimeoutError, BlockingIOError) as exc:
            self._discard()
            raise ClientTimeout(
                f"{self._host_header} did not answer a request completely within {self.timeout_s:g} s; "
                "the backend is stuck, overloaded or trickling (the request was not retried)."
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
        return self._finish(start, end)

    def connect(self) -> None:
        """Open the connection now (if none is open), so that a later request does not connect first:
        an open-loop sender connects before its schedule starts, not when a request is due."""
        self._ready_socket()

    def close(self) -> None:
        self._discard()

    def abort(self) -> None:
        """From another thread: end the request in flight now (its recv returns at once and the request
        fails); the thread that sent it discards the connection. What a stopped study does (docs/security.md)."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def connections(self) -> dict[str, object]:
        """What this client's connections did: opened, closed by the server, requests that reconnected."""
        return {"connections_opened": self.connections_opened, "closed_by_server": self.closed_by_server,
                "reconnected_requests": self.reconnected_requests, "http_versions": sorted(self.http_versions)}

    def __enter__(self) -> Self:
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
            self.closed_by_server += 1
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
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEADER_BYTES)
        self.connections_opened += 1

    def _discard(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._poll = self._h11 = None
        self._limit_changed = False

    def _announce(self, wire: bytes) -> None:
        """Tell h11 which request the wire bytes carry (before the clock), so that it frames the
        response as that request needs (HEAD, Connection: close, Expect, Upgrade)."""
        assert self._h11 is not None
        self._response, self._pieces, self._trailers = None, [], ()
        head_end, request_line, fields = _split_head(wire)
        try:
            _send_request(self._h11, wire, head_end, request_line, fields)
        except h11.LocalProtocolError as exc:
            self._discard()
            raise ClientError(f"the request bytes are not an HTTP/1.1 request that build_request makes: {exc}; nothing was sent.") from None
        except BaseException:  # an interrupt halfway: h11's state no longer matches the stream
            self._discard()
            raise

    # -- the timed path: receive and let h11 frame, no decoding -----------------------------

    def _receive(self, sock: socket.socket, deadline_ns: int) -> int:
        """Receive one response into h11; return the time right after its last bytes arrived.

        A response that needs more than one recv gets the time left before `deadline_ns` as the
        kernel limit of the next one (a setsockopt only on that path, never for a one-recv answer)."""
        parser = self._h11
        assert parser is not None
        view, room = self._view, self.max_response_bytes
        while True:
            n = sock.recv_into(view)
            received = _monotonic_ns()  # the response's end, if these were its last bytes
            if not n:
                self._end_of_stream(parser)
                return received
            room -= n
            if room < 0:
                raise ResponseTooLarge(f"the answer of {self._host_header} is larger than max_response_bytes "
                                       f"({self.max_response_bytes}); the request was not retried.")
            parser.receive_data(cast(bytes, view[:n]))  # h11 appends it to a bytearray: no copy of our own
            try:
                if self._complete(parser):
                    return received
            except h11.RemoteProtocolError as exc:
                raise _malformed(exc) from None
            self._limit_next_recv(sock, deadline_ns - received)

    def _limit_next_recv(self, sock: socket.socket, left_ns: int) -> None:
        if left_ns <= 0:
            raise TimeoutError
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(max(left_ns / 1e9, 1e-6)))
        self._limit_changed = True

    def _complete(self, parser: h11.Connection) -> bool:
        """Take every event h11 can parse so far; True once the final response has ended."""
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                return False
            if isinstance(event, h11.Data):
                self._pieces.append(event.data)
            elif isinstance(event, h11.Response):
                self._response = event
            elif isinstance(event, h11.EndOfMessage):
                self._trailers = event.headers
                return True
            elif isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                self._response = event  # the upgrade the request asked for: the final response
            elif event is h11.PAUSED:  # after that 101, the bytes are no longer HTTP
                return True
            # other interim (1xx) responses are skipped

    def _end_of_stream(self, parser: h11.Connection) -> None:
        """The server closed: the end of a body framed by the close, or an error."""
        parser.receive_data(b"")
        try:
            if self._complete(parser):
                return
        except h11.RemoteProtocolError:
            pass
        if self._response is None:
            where = "before sending a complete header"
        elif (length := _field(self._response.headers, b"content-length")) is not None:
            where = f"after {sum(map(len, self._pieces))} of {int(length)} body bytes"
        else:
            where = "in the middle of a chunked body"
        raise ClientError(f"{self._host_header} closed the connection {where}; the request was not retried.")

    # -- after the clock: decode ------------------------------------------------------------

    def _finish(self, start: int, end: int) -> TimedResponse:
        parser, response = self._h11, self._response
        assert parser is not None and response is not None
        if self._limit_changed and self._sock is not None:  # after the clock: the full limit again
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(self.timeout_s))
        self._limit_changed = False
        pieces = self._pieces
        body = bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
        version = response.http_version.decode("ascii", "replace")
        self.http_versions.add(version)
        if parser.our_state is h11.DONE and parser.their_state is h11.DONE and not parser.trailing_data[0]:
            parser.start_next_cycle()
        else:  # Connection: close, HTTP/1.0, a body framed by the close, or stray bytes after it
            self.closed_by_server += parser.their_state in (h11.MUST_CLOSE, h11.CLOSED)
            self._discard()
        return TimedResponse(
            response.status_code,
            response.reason.decode("latin-1"),
            _fields(response.headers),
            body,
            start,
            end,
            _fields(self._trailers),
            self._reconnected,
            version,
        )


def _split_head(wire: bytes) -> tuple[int, list[bytes], list[list[bytes]]]:
    """(where the head ends, the request line's parts, each header line split at its first ':')."""
    head_end = wire.find(b"\r\n\r\n")
    lines = wire[:head_end].split(b"\r\n") if head_end > 0 else []
    request_line = lines[0].split(b" ") if lines else []
    return head_end, request_line, [line.split(b":", 1) for line in lines[1:]]


def _send_request(parser: h11.Connection, wire: bytes, head_end: int, request_line: list[bytes],
                  fields: list[list[bytes]]) -> None:
    """Hand h11 the request the wire bytes carry (head, body, end); a bad shape is h11.LocalProtocolError."""
    if len(request_line) != 3 or any(len(f) != 2 for f in fields):
        raise h11.LocalProtocolError("not a request line and 'Name: value' headers")
    method, target, _ = request_line
    parser.send(h11.Request(method=method, target=target, headers=[(n, v.strip()) for n, v in fields]))
    if len(wire) > head_end + 4:
        parser.send_with_data_passthrough(h11.Data(data=wire[head_end + 4 :]))
    parser.send(h11.EndOfMessage())


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("@ll", whole, int((seconds - whole) * 1e6))


def _malformed(exc: h11.RemoteProtocolError) -> MalformedResponse:
    text = str(exc)
    meaning = next((ours for theirs, ours in _H11_REFUSALS if text.startswith(theirs)), "the response is not valid HTTP/1.1")
    return MalformedResponse(f"{meaning} (h11: {text}).")


def _field(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    return next((value for key, value in headers if key == name), None)


def _fields(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Header or trailer fields by lower-case name (h11 lower-cases them); repeated fields
    joined with ', '."""
    fields: dict[str, str] = {}
    for name, raw_value in headers:
        key, value = name.decode("latin-1"), raw_value.decode("latin-1")
        fields[key] = f"{fields[key]}, {value}" if key in fields else value
    return fields

"""The hand-written HTTP/1.1 framing `TimedClient` used before it parsed with h11: a baseline
for `invoke bench-client` only, so the cost of h11 is measured side by side in one run.

It frames responses with `bytes.find` over one reusable receive buffer (Content-Length,
chunked bodies with trailers, interim 1xx responses, bodies framed by the server's close) and
decodes headers after the clock. Connecting, timeouts and errors are `TimedClient`'s own;
studies never use this class.
"""

from __future__ import annotations

import socket
from time import monotonic_ns as _monotonic_ns

from ..study.timed_client import ClientError, MalformedResponse, TimedClient, TimedResponse

__all__ = ["HandwrittenFramingClient"]

_NO_BODY_STATUSES = frozenset((204, 304))

# Where one response lies in the receive buffer: message start, header end, body spans,
# trailer span (or None), end of the response, bytes received, framed by EOF.
_Frame = tuple[int, int, list[tuple[int, int]], tuple[int, int] | None, int, int, bool]


class HandwrittenFramingClient(TimedClient):
    """`TimedClient` with the hand-written framing instead of h11 (a benchmark baseline)."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0) -> None:
        super().__init__(host, port, timeout_s)
        self._buf = bytearray(len(self._view))
        self._view = memoryview(self._buf)
        self._head = False
        self._frame: _Frame | None = None
        self._received_ns = 0

    def _announce(self, wire: bytes) -> None:
        self._head = wire.startswith(b"HEAD ")

    def _receive(self, sock: socket.socket, deadline_ns: int) -> int:  # the baseline keeps per-recv limits only
        self._frame = self._receive_frame(sock, self._head)
        return self._received_ns

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

    def _receive_head(self, sock: socket.socket) -> tuple[int, int, int, int]:
        """Read up to the end of the final response's header block (interim 1xx responses are skipped).

        Returns (where the response starts, where its header block ends, the fill level, the status)."""
        buf = self._buf
        filled = msg = 0
        while True:
            head_end = buf.find(b"\r\n\r\n", msg, filled)
            if head_end < 0:
                filled = self._recv_or_fail(sock, filled, "before sending a complete header")
                continue
            code = buf[msg + 9 : msg + 12]
            if not (buf.startswith(b"HTTP/1.", msg) and code.isdigit()):
                raise MalformedResponse(f"the response does not start with an HTTP/1.x status line and a "
                                        f"three-digit code: {bytes(buf[msg:msg + 40])!r}.")
            if not (100 <= int(code) < 200 and int(code) != 101):
                return msg, head_end, filled, int(code)
            msg = head_end + 4

    def _receive_frame(self, sock: socket.socket, head: bool) -> _Frame:
        """Read one response into the buffer and return where its parts lie."""
        msg, head_end, filled, status = self._receive_head(sock)
        buf = self._buf
        body_start = head_end + 4
        if head or status in _NO_BODY_STATUSES or 100 <= status < 200:
            return msg, head_end, [], None, body_start, filled, False
        fields = buf[msg:head_end].lower()
        te = _field_value(fields, b"\r\ntransfer-encoding:")
        if te is not None and te.rsplit(b",", 1)[-1].strip() == b"chunked":
            return self._receive_chunked(sock, msg, head_end, filled)
        # another transfer coding: only the server's close ends the body
        length = _field_value(fields, b"\r\ncontent-length:") if te is None else None
        if length is None:  # no framing: the body ends when the server closes
            while (got := self._recv(sock, filled)) >= 0:
                filled = got
            return msg, head_end, [(body_start, filled)], None, filled, filled, True
        return self._receive_sized(sock, msg, head_end, filled, length)

    def _receive_sized(self, sock: socket.socket, msg: int, head_end: int, filled: int, length: bytearray) -> _Frame:
        """The rest of a body of Content-Length `length`."""
        body_start = head_end + 4
        try:
            body_end = body_start + int(length)
        except ValueError:
            raise MalformedResponse(f"Content-Length {bytes(length)!r} is not a number.") from None
        if body_end > len(self._buf):
            self._grow(body_end)
        while filled < body_end:
            filled = self._recv_or_fail(sock, filled, "in the middle of the body", body_start, body_end)
        return msg, head_end, [(body_start, body_end)], None, body_end, filled, False

    def _receive_chunked(self, sock: socket.socket, msg: int, head_end: int, filled: int) -> _Frame:
        spans, data, filled = self._receive_chunks(sock, head_end + 4, filled)
        buf = self._buf
        while True:  # after the last chunk: optional trailer fields, then an empty line
            if filled >= data + 2 and buf[data : data + 2] == b"\r\n":
                return msg, head_end, spans, None, data + 2, filled, False
            end = buf.find(b"\r\n\r\n", data, filled)
            if end >= 0:
                return msg, head_end, spans, (data, end), end + 4, filled, False
            filled = self._recv_or_fail(sock, filled, "in the trailer of a chunked body")

    def _receive_chunks(self, sock: socket.socket, pos: int, filled: int) -> tuple[list[tuple[int, int]], int, int]:
        """Every chunk from `pos` to the last (size 0) one: (their data spans, where the last one's data
        would start, the fill level)."""
        spans: list[tuple[int, int]] = []
        while True:
            while (eol := self._buf.find(b"\r\n", pos, filled)) < 0:  # the chunk's size line
                filled = self._recv_or_fail(sock, filled, "in the middle of a chunked body")
            try:
                size = int(bytes(self._buf[pos:eol]).split(b";", 1)[0], 16)
            except ValueError:
                line = bytes(self._buf[pos:eol])[:40]
                raise MalformedResponse(f"chunk size line {line!r} is not hexadecimal.") from None
            data = eol + 2
            if size == 0:
                return spans, data, filled
            need = data + size + 2
            if need > len(self._buf):
                self._grow(max(need, 2 * len(self._buf)))
            while filled < need:
                filled = self._recv_or_fail(sock, filled, "in the middle of a chunked body")
            if self._buf[need - 2 : need] != b"\r\n":
                raise MalformedResponse("a chunk is not followed by CRLF; the chunk sizes are wrong.")
            spans.append((data, data + size))
            pos = need

    def _recv_or_fail(self, sock: socket.socket, filled: int, where: str, body_start: int = 0, body_end: int = 0) -> int:
        got = self._recv(sock, filled)
        if got < 0:
            if body_end:
                where = f"after {filled - body_start} of {body_end - body_start} body bytes"
            raise ClientError(f"{self._host_header} closed the connection {where}; the request was not retried.")
        return got

    def _finish(self, start: int, end: int) -> TimedResponse:
        assert self._frame is not None
        msg, head_end, spans, trailer_span, used, filled, eof_framed = self._frame
        buf = self._buf
        try:
            version, status, reason, headers, trailers = _parse_head(buf, msg, head_end, trailer_span)
        except MalformedResponse:
            self._discard()
            raise
        body = bytes(buf[spans[0][0] : spans[0][1]]) if len(spans) == 1 else b"".join(buf[a:b] for a, b in spans)
        # stray bytes after the response (filled != used): do not trust the stream
        if eof_framed or filled != used or not _keeps_alive(version, status, headers):
            self._discard()
        return TimedResponse(status, reason, headers, body, start, end, trailers)


def _parse_head(buf: bytearray, msg: int, head_end: int,
                trailer_span: tuple[int, int] | None) -> tuple[str, int, str, dict[str, str], dict[str, str]]:
    """(version, status, reason, headers, trailers) of the response's header block and trailer."""
    lines = bytes(buf[msg:head_end]).decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    headers = _parse_fields(lines[1:])
    trailers = _parse_fields(bytes(buf[slice(*trailer_span)]).decode("latin-1").split("\r\n")) if trailer_span else {}
    if "transfer-encoding" not in headers and len({v.strip() for v in headers.get("content-length", "").split(",")}) > 1:
        raise MalformedResponse(f"conflicting Content-Length values {headers['content-length']!r}.")
    return version, int(code), reason, headers, trailers


def _keeps_alive(version: str, status: int, headers: dict[str, str]) -> bool:
    """Whether the server lets the connection carry another request (an upgrade never does)."""
    connection = headers.get("connection", "").lower()
    return "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection) and status != 101


def _field_value(fields: bytearray, name: bytes) -> bytearray | None:
    """The first value of a header in the lower-cased header block (name includes CRLF and colon)."""
    i = fields.find(name)
    if i < 0:
        return None
    j = fields.find(b"\r\n", i + 2)
    return fields[i + len(name) : j if j >= 0 else len(fields)].strip()


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

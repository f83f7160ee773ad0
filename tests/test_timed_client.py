"""TimedClient against real loopback servers: http.server, and a raw-socket server that
sends exactly the bytes a test scripts (chunked, trailers, 1xx, closes, stalls)."""

from __future__ import annotations

import http.server
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from openjev_repro.errors import BackendError, ProtocolError
from openjev_repro.study.timed_client import (
    ClientError,
    ClientTimeout,
    MalformedResponse,
    TimedClient,
    build_request,
)

# A handler gets the connection, the request bytes and the request's index on the server;
# it sends whatever it likes and returns False to close the connection afterwards.
Handler = Callable[[socket.socket, bytes, int], bool]


class ScriptedServer:
    """A loopback TCP server that reads whole HTTP requests and lets a handler answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                head, _, data = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    data += conn.recv(65536)
                request, data = head + b"\r\n\r\n" + data[:length], data[length:]
                self.requests.append(request)
                try:
                    if not self.handler(conn, request, len(self.requests) - 1):
                        return
                except OSError:
                    return

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def scripted() -> Iterator[Callable[[Handler], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(handler: Handler) -> ScriptedServer:
        servers.append(ScriptedServer(handler))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def fixed(response: bytes, keep: bool = True) -> Handler:
    def handler(conn: socket.socket, request: bytes, index: int) -> bool:
        conn.sendall(response)
        return keep

    return handler


def trickle(response: bytes, keep: bool = True) -> Handler:
    """Send the response one byte at a time, so every framing step meets partial data."""

    def handler(conn: socket.socket, request: bytes, index: int) -> bool:
        for i in range(len(response)):
            conn.send(response[i : i + 1])
        return keep

    return handler


def chunked(body_parts: list[bytes], trailers: bytes = b"", ext: bytes = b"") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in body_parts)
    return head + chunks + b"0\r\n" + trailers + b"\r\n"


# -- http.server with Content-Length -------------------------------------------------------


class EchoHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        out = json.dumps({"got": body.decode(), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Multi", "a")
        self.send_header("X-Multi", "b")
        self.end_headers()
        self.wfile.write(out)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1234")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_content_length_responses_reuse_one_connection(http_server) -> None:
    port = http_server.server_address[1]
    with TimedClient("127.0.0.1", port, timeout_s=5) as client:
        for i in range(5):
            body = json.dumps({"i": i}).encode()
            r = client.request("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
            assert r.status == 200 and r.reason == "OK"
            assert json.loads(r.body) == {"got": body.decode(), "path": "/v1/systemone"}
            assert r.headers["content-type"] == "application/json"
            assert r.headers["x-multi"] == "a, b"
            assert 0 < r.start_ns < r.end_ns and r.latency_ns == r.end_ns - r.start_ns
        assert client.connections_opened == 1


def test_head_response_has_no_body_and_keeps_the_connection(http_server) -> None:
    with TimedClient("127.0.0.1", http_server.server_address[1], timeout_s=5) as client:
        r = client.request("HEAD", "/")
        assert (r.status, r.body, r.headers["content-length"]) == (200, b"", "1234")
        r = client.request("POST", "/x", b"{}")
        assert r.status == 200 and client.connections_opened == 1


# -- the exact request bytes ---------------------------------------------------------------


def test_request_bytes_are_exactly_what_build_request_makes(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 204 No Content\r\n\r\n"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        r = client.request("post", "/v1/systemone", b'{"a": 1}', {"Content-Type": "application/json"})
    assert r.status == 204 and r.body == b""
    assert server.requests == [
        b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: 8\r\n\r\n{\"a\": 1}" % server.port
    ]


@pytest.mark.parametrize(
    "method, path, headers",
    [("GE T", "/", {}), ("GET", "no-slash", {}), ("GET", "/a b", {}), ("GET", "/", {"X": "a\r\nInjected: 1"}), ("GET", "/", {"Bad:Name": "v"}), ("GET", "/caf\u00e9\u2603", {})],
)
def test_bad_request_parts_are_refused_before_sending(method, path, headers) -> None:
    with pytest.raises(ClientError):
        build_request(method, path, "h:1", b"", headers)


# -- chunked bodies ------------------------------------------------------------------------


@pytest.mark.parametrize("send", [fixed, trickle], ids=["one-send", "byte-by-byte"])
def test_chunked_body_with_trailers_and_extensions(scripted, send) -> None:
    parts = [b'{"answers":', b' {"q": 0.5}', b"}"]
    wire = chunked(parts, trailers=b"X-Checksum: abc\r\nX-Other: 1\r\n", ext=b";name=value")
    server = scripted(send(wire))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        for _ in range(2):
            r = client.request("POST", "/v1/systemone", b"{}")
            assert r.body == b"".join(parts)
            assert r.trailers == {"x-checksum": "abc", "x-other": "1"}
            assert r.headers["transfer-encoding"] == "chunked"
        assert client.connections_opened == 1 and server.connections == 1


def test_chunked_body_without_trailers_and_empty_body(scripted) -> None:
    responses = [chunked([b"hello", b" world"]), chunked([])]
    server = scripted(lambda conn, req, i: conn.sendall(responses[i]) or True)
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert client.request("GET", "/").body == b"hello world"
        r = client.request("GET", "/")
        assert (r.body, r.trailers) == (b"", {})
        assert client.connections_opened == 1


def test_large_bodies_grow_the_buffer(scripted) -> None:
    big = bytes(range(256)) * 1024  # 256 KiB, larger than the initial buffer
    responses = [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big),
        chunked([big[:100_000], big[100_000:]]),
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ]
    server = scripted(lambda conn, req, i: conn.sendall(responses[i]) or True)
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert client.request("GET", "/").body == big
        assert client.request("GET", "/").body == big
        assert client.request("GET", "/").body == b"ok"
        assert client.connections_opened == 1


def test_bad_chunk_size_is_a_protocol_error(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client, pytest.raises(MalformedResponse, match="not hexadecimal"):
        client.request("GET", "/")
    assert issubclass(MalformedResponse, ProtocolError)


def test_chunk_not_followed_by_crlf_is_a_protocol_error(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client, pytest.raises(MalformedResponse):
        client.request("GET", "/")


# -- interim responses, closing, EOF framing -----------------------------------------------


@pytest.mark.parametrize("send", [fixed, trickle], ids=["one-send", "byte-by-byte"])
def test_1xx_responses_are_skipped(scripted, send) -> None:
    wire = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Final: yes\r\n\r\ndone"
    )
    server = scripted(send(wire))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        r = client.request("POST", "/", b"x")
        assert (r.status, r.body, r.headers) == (200, b"done", {"content-length": "4", "x-final": "yes"})
        assert client.request("POST", "/", b"x").body == b"done"
        assert client.connections_opened == 1


def test_connection_close_from_server_reconnects_next_time(scripted) -> None:
    body = b'{"ok": true}'
    wire = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server = scripted(fixed(wire, keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert [client.request("GET", "/").body for _ in range(3)] == [body] * 3
        assert client.connections_opened == 3
    assert len(server.requests) == 3


def test_response_without_length_is_read_to_eof(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        r = client.request("GET", "/")
        assert r.body == b"until the end"
        assert client.request("GET", "/").body == b"until the end"
        assert client.connections_opened == 2


def test_http10_without_keep_alive_closes(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert client.request("GET", "/").body == b"hi"
        assert client.request("GET", "/").body == b"hi"
        assert client.connections_opened == 2


def test_stale_keep_alive_connection_is_replaced_before_sending(scripted) -> None:
    # The server answers as keep-alive but then closes the idle connection.
    server = scripted(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert client.request("GET", "/a").body == b"ok"
        assert select.select([client._sock], [], [], 30)[0]  # the server's FIN has arrived (no sleep guessing when)
        assert client.request("GET", "/b").body == b"ok"
        assert client.connections_opened == 2
    assert [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b"]  # each sent exactly once


def test_close_in_the_middle_of_a_body_raises_and_is_not_retried(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part", keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client, pytest.raises(ClientError, match="9 of 100 body bytes"):
        client.request("POST", "/v1/systemone", b"{}")
    assert len(server.requests) == 1


def test_close_before_any_response_raises_and_is_not_retried(scripted) -> None:
    server = scripted(lambda conn, req, i: False)
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        with pytest.raises(ClientError, match="not retried"):
            client.request("POST", "/v1/systemone", b"{}")
        assert client._sock is None  # the broken connection is dropped at once
        time.sleep(0.05)
        assert len(server.requests) == 1
        # The next request opens a fresh connection rather than using the broken one.
        with pytest.raises(ClientError):
            client.request("POST", "/v1/systemone", b"{}")
        assert client.connections_opened == 2


def test_stray_bytes_after_a_response_drop_the_connection(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert client.request("GET", "/").body == b"ok"
        assert client.request("GET", "/").body == b"ok"
        assert client.connections_opened == 2


# -- timing, timeouts, refusal, garbage ----------------------------------------------------


def test_latency_covers_the_server_delay(scripted) -> None:
    def slow(conn: socket.socket, req: bytes, i: int) -> bool:
        time.sleep(0.05)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return True

    server = scripted(slow)
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        before = time.monotonic_ns()
        r = client.request("GET", "/")
        after = time.monotonic_ns()
    assert before <= r.start_ns and r.end_ns <= after
    assert r.latency_ns >= 50_000_000


def test_slow_server_times_out_clearly(scripted) -> None:
    def stall(conn: socket.socket, req: bytes, i: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        time.sleep(1.0)
        return False

    server = scripted(stall)
    with TimedClient("127.0.0.1", server.port, timeout_s=0.2) as client, pytest.raises(ClientTimeout, match="did not answer a request completely within 0.2 s"):
        client.request("GET", "/")
    assert issubclass(ClientTimeout, ClientError) and issubclass(ClientError, BackendError)
    assert len(server.requests) == 1


def test_connection_refused_is_a_client_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connecting is refused
        with TimedClient("127.0.0.1", port, timeout_s=2) as client:
            with pytest.raises(ClientError, match=f"could not connect to 127.0.0.1:{port}"):
                client.request("GET", "/health")
            assert client.connections_opened == 0


@pytest.mark.parametrize(
    "wire, message",
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.x status line"),
        (b"HTTP/1.1 20\r\n\r\n", "three-digit code"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "three-digit code"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", "conflicting Content-Length"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n", "not 'Name: value'"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", "not followed by CRLF"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", "not hexadecimal"),
        # h11 refuses these, where the hand-written framing read to EOF or returned the 101:
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc", "not valid HTTP/1.1"),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", "not valid HTTP/1.1"),
    ],
)
@pytest.mark.parametrize("send", [fixed, trickle], ids=["one-send", "byte-by-byte"])
def test_malformed_responses_are_protocol_errors(scripted, send, wire, message) -> None:
    server = scripted(send(wire, keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client, pytest.raises(MalformedResponse, match=message):
        client.request("GET", "/")


# -- what h11 changed: the stamp over many recvs, errors kept apart, limits -----------------


def paced(pieces: list[bytes], pause_s: float, last_send_ns: list[int]) -> Handler:
    """Send the pieces with a pause before each; record the time just before the last send."""

    def handler(conn: socket.socket, request: bytes, index: int) -> bool:
        for i, piece in enumerate(pieces):
            time.sleep(pause_s)
            if i == len(pieces) - 1:
                last_send_ns.append(time.monotonic_ns())
            conn.sendall(piece)
        return True

    return handler


def split(wire: bytes, parts: int) -> list[bytes]:
    step = -(-len(wire) // parts)
    return [wire[i : i + step] for i in range(0, len(wire), step)]


@pytest.mark.parametrize(
    "wire, body, trailers",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\nabcdefghijklmnopqrstuvwxyz", b"abcdefghijklmnopqrstuvwxyz", {}),
        (chunked([b"abcdefghij", b"klmnop", b"qrstuvwxyz"], trailers=b"X-Sum: 26\r\n"), b"abcdefghijklmnopqrstuvwxyz", {"x-sum": "26"}),
    ],
    ids=["content-length", "chunked-with-trailers"],
)
def test_a_response_split_over_many_recvs_is_stamped_at_the_last_one(scripted, wire, body, trailers) -> None:
    # Six pieces 20 ms apart, so each arrives in a recv of its own. The final piece is sent
    # after `last_send_ns`: end_ns can only be later if the recv that completed the response
    # stamped it (stamping any earlier recv would give a time before it).
    last_send_ns: list[int] = []
    server = scripted(paced(split(wire, 6), 0.02, last_send_ns))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        for _ in range(2):
            r = client.request("GET", "/")
            returned = time.monotonic_ns()
            assert (r.body, r.trailers) == (body, trailers)
            assert last_send_ns[-1] < r.end_ns <= returned
            assert r.latency_ns >= 6 * 20_000_000
        assert client.connections_opened == 1


@pytest.mark.parametrize(
    "wire, where",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Le", "before sending a complete header"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "in the middle of a chunked body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nX-Sum: 2\r\n", "in the middle of a chunked body"),
    ],
    ids=["in-header", "in-chunk", "in-trailer"],
)
def test_a_close_mid_response_is_a_client_error_not_a_protocol_error(scripted, wire, where) -> None:
    server = scripted(fixed(wire, keep=False))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        with pytest.raises(ClientError, match=f"closed the connection {where}; the request was not retried") as caught:
            client.request("GET", "/")
        assert not isinstance(caught.value, ProtocolError)
        assert client._sock is None
    assert len(server.requests) == 1


def test_bytes_that_are_not_a_request_are_refused_before_sending(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 204 No Content\r\n\r\n"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        with pytest.raises(ClientError, match="nothing was sent"):
            client.send_prepared(b"not an HTTP request")
        with pytest.raises(ClientError, match="nothing was sent"):  # h11: HTTP/1.1 needs Host
            client.send_prepared(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n")
        assert client.request("GET", "/").status == 204  # a fresh connection, then as usual
    assert len(server.requests) == 1


def test_an_upgrade_the_request_asked_for_returns_the_101_and_drops_the_connection(scripted) -> None:
    server = scripted(fixed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: demo\r\nConnection: Upgrade\r\n\r\nnot http"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        for _ in range(2):
            r = client.request("GET", "/", headers={"Upgrade": "demo", "Connection": "Upgrade"})
            assert (r.status, r.headers["upgrade"], r.body) == (101, "demo", b"")
        assert client.connections_opened == 2


def test_http10_keep_alive_is_not_reused(scripted) -> None:
    # h11 does not keep HTTP/1.0 connections alive; the hand-written framing did. Reconnecting
    # happens before the clock starts, so no measurement changes.
    server = scripted(fixed(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi"))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        assert [client.request("GET", "/").body for _ in range(2)] == [b"hi", b"hi"]
        assert client.connections_opened == 2


def test_a_header_block_longer_than_h11s_default_limit_is_accepted(scripted) -> None:
    big = b"x" * 100_000  # h11's own default refuses incomplete events over 16 KiB
    server = scripted(fixed(b"HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 2\r\n\r\nok" % big))
    with TimedClient("127.0.0.1", server.port, timeout_s=5) as client:
        r = client.request("GET", "/")
        assert (r.body, len(r.headers["x-big"])) == (b"ok", 100_000)

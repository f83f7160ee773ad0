"""The reference server sends each response at once: Nagle is off on every accepted socket.

With Nagle on, a response written in two parts (head, then body) waited for the client's delayed
ACK of the first part, about 40 ms on Linux loopback, and that wait was inside every latency a
study measured (found on the H200 on 2026-12-01; see docs/backend.md).
"""

from __future__ import annotations

import socket
import threading

import httpx

from openjev_repro.backend.server import ReferenceServer, StaticMeta

META = StaticMeta(base_model_id="none", method="scalar_head", checkpoint_sha256=None, base_revision=None,
                  code_commit="test")


class RecordingServer(ReferenceServer):
    """Records TCP_NODELAY on each accepted socket once the handler has set it up and answered."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), META)
        self.nodelay: list[int] = []

    def finish_request(self, request, client_address):  # type: ignore[no-untyped-def]
        super().finish_request(request, client_address)
        self.nodelay.append(request.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


def test_every_accepted_socket_has_nagle_off() -> None:
    server = RecordingServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}") as client:
            for _ in range(2):  # one keep-alive connection, two responses
                assert client.get("/health").status_code == 503  # no model attached: loading
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_address[1]}") as client:
            assert client.get("/v1/models").status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    assert len(server.nodelay) == 2 and all(server.nodelay), server.nodelay

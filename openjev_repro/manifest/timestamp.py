"""An RFC 3161 timestamp of a file's bytes, asked of a timestamp authority the user names (`--tsa URL`).

The request is the fixed DER shape RFC 3161 section 2.4.1 defines: version 1, the SHA-256 message imprint,
a random nonce, certReq TRUE (so the reply carries the authority's certificate and anyone can check it with
`openssl ts -verify -data FILE -in FILE.tsr -CAfile CA`). The reply is kept as the authority sent it once its
PKIStatus says granted (0) or grantedWithMods (1); anything else is one error naming the status.
"""

from __future__ import annotations

import hashlib
import secrets
import urllib.error
import urllib.request

from ..errors import EvidenceError

__all__ = ["request_timestamp", "timestamp_query"]

_SHA256_ALGORITHM = bytes.fromhex("300d06096086480165030402010500")  # AlgorithmIdentifier {sha256, NULL}
_MAX_REPLY = 1 << 20
_TIMEOUT_S = 30


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + content


def _integer(value: int) -> bytes:
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def timestamp_query(data: bytes, nonce: int) -> bytes:
    """The DER TimeStampReq for the sha256 of `data`."""
    imprint = _der(0x30, _SHA256_ALGORITHM + _der(0x04, hashlib.sha256(data).digest()))
    return _der(0x30, _integer(1) + imprint + _integer(nonce) + b"\x01\x01\xff")


def _read_tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at `at`."""
    if at + 2 > len(data):
        raise ValueError("truncated")
    tag, first = data[at], data[at + 1]
    at += 2
    if first & 0x80:
        size = first & 0x7F
        if size == 0 or size > 4 or at + size > len(data):
            raise ValueError("bad length")
        length, at = int.from_bytes(data[at:at + size], "big"), at + size
    else:
        length = first
    if at + length > len(data):
        raise ValueError("truncated")
    return tag, at, at + length


def _status(reply: bytes) -> int:
    """PKIStatusInfo.status of a TimeStampResp."""
    tag, start, _ = _read_tlv(reply, 0)
    inner_tag, inner, _ = _read_tlv(reply, start)
    status_tag, s0, s1 = _read_tlv(reply, inner)
    if (tag, inner_tag, status_tag) != (0x30, 0x30, 0x02):
        raise ValueError("not a TimeStampResp")
    return int.from_bytes(reply[s0:s1], "big")


def request_timestamp(data: bytes, url: str) -> bytes:
    """The authority's DER TimeStampResp for `data`; EvidenceError (one line) when none is granted."""
    if not url.startswith(("http://", "https://")):
        raise EvidenceError(f"--tsa {url!r}: a timestamp authority is an http:// or https:// URL.")
    query = timestamp_query(data, secrets.randbits(63))
    request = urllib.request.Request(url, data=query, method="POST",
                                     headers={"Content-Type": "application/timestamp-query"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as answer:
            reply = answer.read(_MAX_REPLY + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise EvidenceError(f"--tsa {url}: no timestamp ({exc}).") from None
    try:
        status = _status(reply) if len(reply) <= _MAX_REPLY else -1
    except ValueError as exc:
        raise EvidenceError(f"--tsa {url}: the reply is not an RFC 3161 TimeStampResp ({exc}).") from None
    if status not in (0, 1):
        raise EvidenceError(f"--tsa {url}: the authority did not grant a timestamp (PKIStatus {status}).")
    return reply

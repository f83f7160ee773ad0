"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1).

The signature covers the pre-authentication encoding

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

where LEN is the byte length in ASCII decimal and SP one space. Payload and signatures are
standard base64 (with padding). An unsigned envelope has an empty `signatures` list.

The envelope file is written in one canonical form (sorted keys, indent 2, trailing
newline) and `parse_envelope` refuses any other form, so a changed byte anywhere in the
file is detected even where JSON would not care (whitespace). The payload and every signature
must be canonical base64 too: decoded and encoded again they give the same text, so padding
bits or padding cannot spell the same bytes another way.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import VerificationError
from ..limits import loads_bounded
from .keys import keyid

__all__ = [
    "PAYLOAD_TYPE",
    "envelope_bytes",
    "make_envelope",
    "pae",
    "parse_envelope",
    "payload_of",
    "verify_envelope",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, body: bytes) -> bytes:
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(body), body)


def make_envelope(payload: bytes, key: Ed25519PrivateKey | None, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    signatures = []
    if key is not None:
        sig = key.sign(pae(payload_type, payload))
        signatures.append({"keyid": keyid(key.public_key()), "sig": base64.standard_b64encode(sig).decode("ascii")})
    return {
        "payload": base64.standard_b64encode(payload).decode("ascii"),
        "payloadType": payload_type,
        "signatures": signatures,
    }


def envelope_bytes(envelope: dict[str, Any]) -> bytes:
    return (json.dumps(envelope, indent=2, sort_keys=True) + "\n").encode("utf-8")


def parse_envelope(data: bytes, source: str = "envelope") -> dict[str, Any]:
    """Parse envelope bytes; refuse anything that is not exactly our canonical form."""
    try:
        envelope = loads_bounded(data.decode("utf-8"), max_depth=3)
    except ValueError as exc:  # bad UTF-8, syntax, nesting, huge integers
        raise VerificationError(f"{source} is not valid JSON ({exc}); it is truncated or damaged.") from None
    problem = _envelope_problem(envelope)
    if problem:
        raise VerificationError(f"{source}{problem}")
    if envelope_bytes(envelope) != data:
        raise VerificationError(f"{source} is not in canonical form; it was edited after it was written.")
    return envelope


def _envelope_problem(envelope: Any) -> str | None:
    """What follows the source's name in the error for an envelope not of the DSSE shape; None if it is."""
    if not isinstance(envelope, dict) or set(envelope) != {"payload", "payloadType", "signatures"}:
        return " is not a DSSE envelope (payload, payloadType, signatures)."
    if envelope["payloadType"] != PAYLOAD_TYPE:
        return f" has payloadType {envelope['payloadType']!r:.80}, expected {PAYLOAD_TYPE!r}."
    if not isinstance(envelope["payload"], str):
        return ": payload is not a base64 string."
    if not _signatures_ok(envelope["signatures"]):
        return ": signatures is not a list of {keyid, sig} strings."
    if not _canonical_base64(envelope["payload"]):
        return ": payload is not canonical base64 (decoded and encoded again it differs); it was re-spelled."
    if not all(_canonical_base64(s["sig"]) for s in envelope["signatures"]):
        return ": a signature is not canonical base64 (decoded and encoded again it differs); it was re-spelled."
    return None


def _canonical_base64(text: str) -> bool:
    """Standard base64 with padding that encodes its own decoded bytes exactly as written."""
    try:
        return base64.standard_b64encode(base64.b64decode(text, validate=True)).decode("ascii") == text
    except (binascii.Error, ValueError):
        return False


def _signatures_ok(signatures: Any) -> bool:
    return isinstance(signatures, list) and all(
        isinstance(s, dict) and set(s) == {"keyid", "sig"} and all(isinstance(v, str) for v in s.values())
        for s in signatures
    )


def payload_of(envelope: dict[str, Any]) -> bytes:
    try:
        return base64.b64decode(envelope["payload"], validate=True)
    except (binascii.Error, TypeError) as exc:
        raise VerificationError(f"The envelope payload is not standard base64 ({exc}).") from exc


def verify_envelope(envelope: dict[str, Any], public_key: Ed25519PublicKey) -> str:
    """Check that some signature is by `public_key` over PAE(type, payload); return its keyid."""
    want = keyid(public_key)
    message = pae(envelope["payloadType"], payload_of(envelope))
    ids = []
    for entry in envelope["signatures"]:
        ids.append(str(entry.get("keyid")))
        if entry.get("keyid") != want:
            continue
        try:
            sig = base64.b64decode(entry.get("sig", ""), validate=True)
            public_key.verify(sig, message)
            return want
        except (binascii.Error, TypeError, InvalidSignature):
            raise VerificationError(f"The signature by key {want[:16]}… does not match the payload.") from None
    if not ids:
        raise VerificationError("The envelope is unsigned (no signatures).")
    raise VerificationError(
        f"No signature by the given key {want[:16]}…; the envelope is signed by {', '.join(i[:16] + '…' for i in ids)}."
    )

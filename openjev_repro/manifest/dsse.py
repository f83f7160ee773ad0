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

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import VerificationError
from ..limits import loads_bounded
from .keys import keyid

__all__ = [
    "PAYLOAD_TYPE",
    "Envelope",
    "Signature",
    "envelope_bytes",
    "make_envelope",
    "pae",
    "parse_envelope",
    "payload_of",
    "verify_envelope",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
_FIELDS = {"payload", "payloadType", "signatures"}


def pae(payload_type: str, body: bytes) -> bytes:
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(body), body)


def _canonical_base64(text: str) -> bool:
    """Standard base64 with padding that encodes its own decoded bytes exactly as written."""
    try:
        return base64.standard_b64encode(base64.b64decode(text, validate=True)).decode("ascii") == text
    except (binascii.Error, ValueError):
        return False


def _base64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode("ascii")


class Signature(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One DSSE signature: the signer's key id and the base64 Ed25519 signature over PAE(type, payload)."""

    keyid: str
    sig: str


class Envelope(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A DSSE envelope, decoded once (`parse_envelope`) or made by signing (`make_envelope`)."""

    payload: str
    payload_type: str = msgspec.field(name="payloadType")
    signatures: tuple[Signature, ...]

    @property
    def keyids(self) -> list[str]:
        return [s.keyid for s in self.signatures]

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = msgspec.to_builtins(self)
        return data

    def problem(self) -> str | None:
        """What follows the source's name in the error for an envelope not in our form; None if it is."""
        if self.payload_type != PAYLOAD_TYPE:
            return f" has payloadType {self.payload_type!r:.80}, expected {PAYLOAD_TYPE!r}."
        if not _canonical_base64(self.payload):
            return ": payload is not canonical base64 (decoded and encoded again it differs); it was re-spelled."
        if not all(_canonical_base64(s.sig) for s in self.signatures):
            return ": a signature is not canonical base64 (decoded and encoded again it differs); it was re-spelled."
        return None


def make_envelope(payload: bytes, key: Ed25519PrivateKey | None, payload_type: str = PAYLOAD_TYPE) -> Envelope:
    signatures = () if key is None else (
        Signature(keyid=keyid(key.public_key()), sig=_base64(key.sign(pae(payload_type, payload)))),)
    return Envelope(payload=_base64(payload), payload_type=payload_type, signatures=signatures)


def envelope_bytes(envelope: Envelope | dict[str, object]) -> bytes:
    """The canonical form of an envelope (or of a hand-built one: tests write damaged envelopes with it)."""
    return (json.dumps(msgspec.to_builtins(envelope), indent=2, sort_keys=True) + "\n").encode("utf-8")


def parse_envelope(data: bytes, source: str = "envelope") -> Envelope:
    """Parse envelope bytes; refuse anything that is not exactly our canonical form."""
    try:
        document = loads_bounded(data.decode("utf-8"), max_depth=3)
    except ValueError as exc:  # bad UTF-8, syntax, nesting, huge integers
        raise VerificationError(f"{source} is not valid JSON ({exc}); it is truncated or damaged.") from None
    if not isinstance(document, dict) or set(document) != _FIELDS:
        raise VerificationError(f"{source} is not a DSSE envelope (payload, payloadType, signatures).")
    try:
        envelope = msgspec.convert(document, Envelope, strict=True)
    except msgspec.ValidationError as exc:
        field = str(exc).rpartition("`$.")[2].partition("`")[0]
        raise VerificationError(source + {
            "payload": ": payload is not a base64 string.",
            "payloadType": f" has payloadType {document.get('payloadType')!r:.80}, expected {PAYLOAD_TYPE!r}.",
        }.get(field.partition("[")[0], ": signatures is not a list of {keyid, sig} strings.")) from None
    problem = envelope.problem()
    if problem:
        raise VerificationError(f"{source}{problem}")
    if envelope_bytes(envelope) != data:
        raise VerificationError(f"{source} is not in canonical form; it was edited after it was written.")
    return envelope


def payload_of(envelope: Envelope) -> bytes:
    try:
        return base64.b64decode(envelope.payload, validate=True)
    except (binascii.Error, TypeError) as exc:
        raise VerificationError(f"The envelope payload is not standard base64 ({exc}).") from exc


def verify_envelope(envelope: Envelope, public_key: Ed25519PublicKey) -> str:
    """Check that some signature is by `public_key` over PAE(type, payload); return its keyid."""
    want = keyid(public_key)
    message = pae(envelope.payload_type, payload_of(envelope))
    for entry in envelope.signatures:
        if entry.keyid != want:
            continue
        try:
            public_key.verify(base64.b64decode(entry.sig, validate=True), message)
            return want
        except (binascii.Error, InvalidSignature):
            raise VerificationError(f"The signature by key {want[:16]}… does not match the payload.") from None
    if not envelope.signatures:
        raise VerificationError("The envelope is unsigned (no signatures).")
    raise VerificationError(
        f"No signature by the given key {want[:16]}…; the envelope is signed by "
        f"{', '.join(i[:16] + '…' for i in envelope.keyids)}."
    )

"""Ed25519 signing keys: generate, load, and name them by keyid.

The keyid is the sha256 (hex) of the raw 32-byte public key, so anyone holding the public
key can recompute it. Private keys are PKCS#8 PEM files with mode 0600; their bytes are
never logged and never enter a manifest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..errors import VerificationError

__all__ = [
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "generate_keypair",
    "keyid",
    "load_private_key",
    "load_public_key",
    "trusted_public_key",
]

PRIVATE_KEY_NAME = "openjev-repro.key"
PUBLIC_KEY_NAME = "openjev-repro.pub"


def keyid(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def generate_keypair(out_dir: Path) -> tuple[Path, Path, str]:
    """Write a new private key (0600) and its public key into out_dir; never overwrites."""
    out_dir = Path(out_dir)
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        raise VerificationError(f"--out {out_dir} exists and is not a directory; keygen writes two files into a directory.")
    private_path, public_path = out_dir / PRIVATE_KEY_NAME, out_dir / PUBLIC_KEY_NAME
    for path in (private_path, public_path):
        if os.path.lexists(path):  # a dangling link counts: writing through it would create a file elsewhere
            what = "is a symlink" if path.is_symlink() else "already exists"
            raise VerificationError(f"{path} {what}; choose another --out directory or move the old key away.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        return _write_keypair(private_path, public_path)
    except OSError as exc:
        raise VerificationError(f"Cannot write the key pair into {out_dir} ({exc.strerror or exc}).") from None


def _write_keypair(private_path: Path, public_path: Path) -> tuple[Path, Path, str]:
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Create with 0600 from the start, so the key is never readable by others, not even briefly.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem)
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(public_pem)
    return private_path, public_path, keyid(key.public_key())


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise VerificationError(f"Cannot read the private key {path} ({exc.strerror}).") from exc
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # The message of a parse failure could echo key material; say only what is wrong.
        raise VerificationError(f"{path} is not an unencrypted PEM private key; create one with `invoke keygen`.") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise VerificationError(f"{path} is not an Ed25519 key; create one with `invoke keygen`.")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise VerificationError(f"Cannot read the public key {path} ({exc.strerror}).") from exc
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise VerificationError(f"{path} is not a PEM public key; pass the .pub file written by `invoke keygen`.") from None
    if not isinstance(key, Ed25519PublicKey):
        raise VerificationError(f"{path} is not an Ed25519 public key.")
    return key


def trusted_public_key(pubkey: Path | None, *material: Path, option: str = "--pubkey") -> Path:
    """The user's trust anchor: a public key given explicitly, never one found inside the material
    being verified (a key beside the evidence is the attacker's to swap)."""
    if pubkey is None:
        raise VerificationError(f"{option} FILE is required: the public key the evidence must be signed by "
                                "comes from you (e.g. the .pub `invoke keygen` wrote), never from the evidence.")
    resolved = Path(pubkey).resolve()
    for folder in material:
        root = Path(folder).resolve()
        if resolved == root or root in resolved.parents:
            raise VerificationError(f"{option} {pubkey} lies inside {folder}, the material being verified; "
                                    "a key found there is never trusted. Give the key you hold yourself.")
    return Path(pubkey)

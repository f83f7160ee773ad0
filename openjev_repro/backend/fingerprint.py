"""Weights fingerprint: an exact, device-side digest of every parameter and buffer of a model.

Method (version `wfp1`), chosen so that a 27B model in BF16 (about 54 GB) is fingerprinted on
the GPU in seconds without copying the weights to the host:

1. Tensors are taken in canonical order (sorted by name). Each one contributes its name, dtype,
   shape and element count to a SHA-256 stream.
2. Its exact bytes are viewed as unsigned 16-bit words (8-bit for 1-byte dtypes), in chunks of
   2**24 words. For each chunk two checksums are computed on the tensor's own device, in int64
   without overflow, modulo the Mersenne prime p = 2**31 - 1:
       c1 = sum_i w_i * (i + 1)            mod p
       c2 = sum_i w_i * ((i + 1)**2 mod p) mod p
   and both (as little-endian int64) are fed to the SHA-256 stream, chunk after chunk.
3. The fingerprint is "wfp1:" + the SHA-256 hex digest.

What it guarantees, honestly: any change of the names, dtypes, shapes or element counts changes
the digest (SHA-256). Inside a chunk every word has a distinct, non-zero weight below p and
every word is below p, so any change of a single word, and any exchange of two different words,
changes c1. Two tensors with unrelated contents (different seeds, different weights) agree on
one chunk's (c1, c2) with probability about p**-2 = 2**-62. This is a checksum against
accidental differences, not a cryptographic hash of the bytes: someone who wants to can
construct two different tensors with the same fingerprint. Use `hashing.hash_file` on the
checkpoint files for that (the backend reports `checkpoint_sha256`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from typing import Any

import msgspec

__all__ = ["CHUNK_WORDS", "PRIME", "VERSION", "WeightsFingerprint", "named_tensors", "weights_fingerprint"]

VERSION = "wfp1"
PRIME = 2**31 - 1
CHUNK_WORDS = 1 << 24


def named_tensors(prefix: str, module: Any) -> list[tuple[str, Any]]:
    """Every parameter and buffer of `module`, named `prefix + name`, duplicates (tied weights) once."""
    seen: dict[str, Any] = {}
    for name, tensor in list(module.named_parameters(remove_duplicate=False)) + list(
            module.named_buffers(remove_duplicate=False)):
        seen.setdefault(prefix + name, tensor)
    return list(seen.items())


class _Weights:
    """The position weights (i + 1) and ((i + 1)**2 mod p) of one chunk, cached per device."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple[Any, Any]] = {}

    def get(self, device: Any, n: int) -> tuple[Any, Any]:
        import torch

        key = str(device)
        if key not in self.cache or self.cache[key][0].numel() < n:   # grown to the longest chunk seen
            size = min(CHUNK_WORDS, max(n, 2 * self.cache[key][0].numel() if key in self.cache else n))
            r1 = torch.arange(1, size + 1, dtype=torch.int64, device=device)
            self.cache[key] = (r1, (r1 * r1) % PRIME)
        r1, r2 = self.cache[key]
        return r1[:n], r2[:n]


def _words(tensor: Any) -> Any:
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    if flat.element_size() == 1:
        return flat.view(torch.uint8)
    return flat.view(torch.int16)


def _tensor_sums(tensor: Any, weights: _Weights) -> Any:
    """(chunks, 2) int64 tensor of (c1, c2) on the tensor's device."""
    import torch

    words = _words(tensor)
    out = []
    mask = 0xFF if words.dtype == torch.uint8 else 0xFFFF
    for start in range(0, words.numel(), CHUNK_WORDS):
        chunk = words[start:start + CHUNK_WORDS].to(torch.int64) & mask
        r1, r2 = weights.get(words.device, chunk.numel())
        c1 = ((chunk * r1) % PRIME).sum() % PRIME
        c2 = ((chunk * r2) % PRIME).sum() % PRIME
        out.append(torch.stack([c1, c2]))
    if not out:
        return torch.zeros((0, 2), dtype=torch.int64)
    return torch.stack(out)


class WeightsFingerprint(msgspec.Struct, frozen=True, kw_only=True):
    fingerprint: str  # "wfp1:<sha256>"
    tensors: int
    bytes: int  # the tensors' bytes
    seconds: float  # how long taking it took, rounded to 1 ms


def weights_fingerprint(tensors: Iterable[tuple[str, Any]]) -> WeightsFingerprint:
    """The fingerprint of (name, tensor) pairs."""
    import torch

    started = time.perf_counter()
    items = sorted(tensors, key=lambda item: item[0])
    names = [name for name, _ in items]
    if len(set(names)) != len(names):
        raise ValueError("weights_fingerprint: duplicate tensor names")
    weights = _Weights()
    with torch.no_grad():
        sums = [_tensor_sums(tensor, weights) for _, tensor in items]
        host = [s.cpu() for s in sums]   # one small transfer per tensor: 16 bytes per chunk
    digest = hashlib.sha256(VERSION.encode() + b"\0")
    total = 0
    for (name, tensor), chunk_sums in zip(items, host, strict=True):
        dtype = str(tensor.dtype).removeprefix("torch.")
        header = f"{name}\0{dtype}\0{list(tensor.shape)}\0{tensor.numel()}\0"
        digest.update(header.encode())
        digest.update(chunk_sums.numpy().astype("<i8").tobytes())
        total += tensor.numel() * tensor.element_size()
    return WeightsFingerprint(fingerprint=f"{VERSION}:{digest.hexdigest()}", tensors=len(items), bytes=total,
                              seconds=round(time.perf_counter() - started, 3))

"""`--format sha256sums`: a `SHA256SUMS` file over gzip members, both digest levels checked.

The layout of system1-omni's `recipe/lfm2/results/<run>/`: `SHA256SUMS` (sha256sum's format,
`<hex>  <name>` or `<hex> *<name>`) lists every archived file, most of them gzip members
(`bench.jsonl.gz`, `worker.jsonl.gz`, `*.summary.json.gz`, ...); `provenance.json`, where
published, adds under `report_source_sha256` the sha256 of uncompressed originals. Each
listed member is checked against SHA256SUMS; each one whose uncompressed original has a
published digest is decompressed (bounded) and checked too.

The real members are binary and were not read here, so the row and summary shapes inside them
are this importer's assumption, documented in docs/manifest.md: rows `<stem>.jsonl.gz` hold one
object per sample with `variant`, `cell`, `id` (or `sample`), and `seconds` (or `latency_s`,
or `latency_ms`); `<stem>.summary.json.gz` holds `summary.variants[variant][cell]` =
`{n, p50_ms, p95_ms}` over that member's rows.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec

from ...errors import EvidenceError, InputMismatch
from ...evidence.decoding import UNSET, Quoted, UnsetType, decode
from .layout import Layout, finish
from .manifest import file_state, read_finite_json
from .published import NotAnObject
from .run import Origin
from .samples import Sample, check_id, check_seconds

__all__ = ["detect", "import_sha256sums", "read_sums"]

SUMS_NAME, PROVENANCE_NAME = "SHA256SUMS", "provenance.json"
_LINE = re.compile(r"^(?P<digest>[0-9a-fA-F]{64}) [ *](?P<name>[^/\\\x00-\x1f]+)$")
_ROWS = re.compile(r"^(?P<stem>[a-z0-9][a-z0-9_-]*)\.jsonl\.gz$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
MAX_MEMBER_BYTES = 512 << 20  # decompressed: a gzip bomb stops here


def detect(src: Path) -> bool:
    return (Path(src) / SUMS_NAME).is_file()


def read_sums(root: Path) -> dict[str, str]:
    """SHA256SUMS as {name: sha256}; InputMismatch on a malformed line or a name listed twice."""
    try:
        text = (root / SUMS_NAME).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputMismatch(f"{SUMS_NAME}: not UTF-8 text.") from None
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.match(line)
        digest, name = match.groups() if match else ("", "")
        if not match or name in (".", "..", SUMS_NAME):
            raise InputMismatch(f"{SUMS_NAME}:{number}: {line[:80]!r} is not '<sha256>  <file name>'.")
        if name in sums:
            raise InputMismatch(f"{SUMS_NAME}:{number}: {name} is listed twice.")
        sums[name] = digest.lower()
    if not sums:
        raise InputMismatch(f"{SUMS_NAME}: lists no files.")
    return sums


def _inflate(path: Path) -> bytes:
    """A gzip member's content, at most MAX_MEMBER_BYTES."""
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read(MAX_MEMBER_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise EvidenceError(f"{path.name}: not a readable gzip member ({exc}).") from None
    if len(data) > MAX_MEMBER_BYTES:
        raise EvidenceError(f"{path.name}: decompresses to over {MAX_MEMBER_BYTES >> 20} MiB; not imported.")
    return data


def _verify(root: Path, sums: dict[str, str], originals: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(verified, absent, originals verified): each member against SHA256SUMS and, where provenance.json
    publishes its uncompressed original's sha256, that second level too. InputMismatch naming every digest
    that differs, and every problem of the listing."""
    problems: list[str] = []
    verified: list[str] = []
    absent: list[str] = []
    inner: list[str] = []
    for name, digest in sorted(sums.items()):
        state = file_state(root / name, digest, SUMS_NAME)
        original = name.removesuffix(".gz") if name.endswith(".gz") else ""
        if state == "absent":
            absent.append(name)
        elif state:
            problems.append(f"{name}: {state}")
        elif original in originals and hashlib.sha256(_inflate(root / name)).hexdigest() != originals[original]:
            verified.append(name)
            problems.append(f"{name}: its uncompressed {original} differs from {PROVENANCE_NAME}'s sha256")
        else:
            verified.append(name)
            inner += [original] if original in originals else []
    problems += _listing_problems(root, sums, absent)
    if problems:
        raise InputMismatch(f"{root} does not match its {SUMS_NAME}: " + "; ".join(problems)
                            + ". Nothing was imported; fetch the evidence again.")
    return verified, absent, inner


def _listing_problems(root: Path, sums: dict[str, str], absent: list[str]) -> list[str]:
    """A present file SHA256SUMS does not list, and a listed rows member that is missing (never dropped from
    the count of the published figures)."""
    present = sorted(p.name for p in root.iterdir() if p.is_file())
    return ([f"{n}: present but not in {SUMS_NAME}" for n in present if n not in sums and n != SUMS_NAME]
            + [f"{n}: listed but missing; the published figures count its rows" for n in absent if _ROWS.match(n)])


class Originals(msgspec.Struct, frozen=True, kw_only=True):
    """provenance.json of this layout: the sha256 of uncompressed originals, by name."""

    report_source_sha256: dict[str, Quoted] | NotAnObject = None


def _originals(root: Path, sums: dict[str, str]) -> tuple[Any, dict[str, str]]:
    if PROVENANCE_NAME not in sums or not (root / PROVENANCE_NAME).is_file():
        return None, {}
    data = read_finite_json(root / PROVENANCE_NAME, PROVENANCE_NAME)
    listed = decode(data, Originals, PROVENANCE_NAME).report_source_sha256 if isinstance(data, dict) else None
    if not isinstance(listed, dict):
        return data, {}
    bad = [k for k, v in listed.items() if not isinstance(v, str) or not re.fullmatch(r"[0-9a-f]{64}", v)]
    if bad:
        raise InputMismatch(f"{PROVENANCE_NAME}: report_source_sha256 of {bad[0][:60]!r} is not 64 hex digits.")
    return data, {k: str(v) for k, v in listed.items()}


class SumsRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of a `<stem>.jsonl.gz` member (this importer's assumption, docs/manifest.md): the keys it
    reads; the row itself is kept whole, as their body."""

    variant: Quoted = "default"
    cell: Quoted = "all"
    seconds: Quoted | UnsetType = UNSET
    latency_s: Quoted | UnsetType = UNSET
    latency_ms: Quoted | UnsetType = UNSET
    id: Quoted | UnsetType = UNSET
    sample: Quoted | UnsetType = UNSET

    def sample_of(self, body: Any, stem: str, where: str) -> Sample:
        variant, cell = str(self.variant).lower(), str(self.cell).lower()
        if not _NAME.match(variant) or not _NAME.match(cell):
            raise EvidenceError(f"{where}: variant {variant[:40]!r} or cell {cell[:40]!r} is not a name.")
        given = self.latency_s if self.seconds is UNSET else self.seconds
        if given is not UNSET:
            seconds = check_seconds(given, where, "seconds")
        elif self.latency_ms is not UNSET:
            seconds = check_seconds(self.latency_ms, where, "latency_ms") / 1000
        else:
            raise EvidenceError(f"{where}: no seconds, latency_s or latency_ms.")
        case = self.id if self.id is not UNSET else None if self.sample is UNSET else self.sample
        case = check_id(str(case) if type(case) is int else case, where)  # an integer sample number, not a bool
        return Sample(id=case, arm=f"{stem}.{variant}", workload=cell, pass_index=1, seconds=seconds, body=body)


def _rows(root: Path, name: str) -> list[Sample]:
    stem = name.removesuffix(".jsonl.gz")
    try:
        text = _inflate(root / name).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"{name}: not UTF-8 text inside ({exc.reason}).") from None
    out, seen = [], set()
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{name}:{number}"
        try:
            obj = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except (ValueError, RecursionError) as exc:
            raise EvidenceError(f"{where}: not JSON ({str(exc)[:80]}).") from None
        sample = decode(obj, SumsRow, where).sample_of(obj, stem, where)
        if (sample.arm, sample.workload, sample.id) in seen:
            raise EvidenceError(f"{where}: sample {sample.id} of {sample.arm} {sample.workload} appears twice.")
        seen.add((sample.arm, sample.workload, sample.id))
        out.append(sample)
    if not out:
        raise EvidenceError(f"{name}: holds no rows.")
    return out


def _summaries(root: Path, verified: list[str]) -> dict[str, Any]:
    out = {}
    for name in verified:
        if name.endswith(".summary.json.gz"):
            try:
                out[name[: -len(".summary.json.gz")]] = json.loads(_inflate(root / name).decode("utf-8"),
                                                                   parse_constant=lambda c: None)
            except (ValueError, RecursionError) as exc:
                raise EvidenceError(f"{name}: not JSON inside ({str(exc)[:80]}).") from None
    return out


def import_sha256sums(src: Path, out: Path, *, workload: str = "mixed", subdir: str | None = None,
                      origin: Origin | None = None) -> dict:
    """Verify `src` against SHA256SUMS (and provenance.json's uncompressed digests); import its rows."""
    root = Path(src).resolve()
    if not detect(root):
        raise InputMismatch(f"{src}: no {SUMS_NAME}; not the sha256sums layout.")
    sums = read_sums(root)
    provenance, originals = _originals(root, sums)
    verified, absent, inner = _verify(root, sums, originals)
    members = sorted(n for n in verified if _ROWS.match(n))
    if not members:
        raise InputMismatch(f"{root}: no verified <name>.jsonl.gz rows member; nothing to import.")
    samples = [s for name in members for s in _rows(root, name)]
    layout = Layout(fmt="sha256sums", root=root, samples=samples, summary=_summaries(root, verified),
                    files=[SUMS_NAME, *verified], provenance="verified", digests_file=SUMS_NAME,
                    verified=verified, absent=absent,
                    source_digests={n: {"sha256": d, **({"original_sha256": originals[n[:-3]]} if n[:-3] in originals
                                                         else {})} for n, d in sums.items()},  # as published
                    documents=[provenance] if provenance is not None else [],
                    meta={"originals_verified": inner, "originals_published": sorted(originals)},
                    note=("Imported evidence (sha256sums): gzip members checked against SHA256SUMS and, where "
                          f"{PROVENANCE_NAME} publishes them, their uncompressed originals too."))
    return finish(layout, out, origin)

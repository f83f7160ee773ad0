"""The record of a run's signed statement (manifest.dsse.json's payload): an in-toto Statement v1.

    {"_type": STATEMENT_TYPE,
     "subject": [{"name": "<path relative to the run>", "digest": {"sha256": "…"}}, …],
     "predicateType": PREDICATE_TYPE,
     "predicate": {"format_version": 1, "signed", "aggregate_only", "state", "summary", "gates", …}}

`Statement.parse` is the one shape check of a statement (what `manifest.run_manifest.read_statement`
and verify rely on): the types, the predicate's format version, every subject a name and a
sha256, and an aggregate-only predicate's omitted files and source envelope. `build_statement`
(manifest/run_manifest.py) returns a `Statement`; its `payload()` is the signed bytes, the same
canonical JSON (sorted keys, no spaces) as before the record existed.

Predicate format history (the version is in the predicate type URI and `format_version`):
    1  (2026-11) first version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from ..errors import VerificationError
from .files import check_format

__all__ = ["PREDICATE_FORMAT_VERSION", "PREDICATE_TYPE", "STATEMENT_TYPE", "Statement", "Subject"]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://openjev-repro.dev/study-result/v1"
PREDICATE_FORMAT_VERSION = 1

class _Digest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class _SubjectFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    digest: _Digest


class _Omitted(msgspec.Struct, frozen=True):
    name: str
    sha256: str


@dataclass(frozen=True)
class Subject:
    """A file the statement vouches for: its path relative to the run and its sha256."""

    name: str
    sha256: str

    @classmethod
    def from_json(cls, data: Any) -> Subject | None:
        """The subject, None unless it is exactly {name: string, digest: {sha256: 64 hex digits}}."""
        try:
            subject = msgspec.convert(data, _SubjectFile, strict=True)
        except msgspec.ValidationError:
            return None
        return cls(subject.name, subject.digest.sha256)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": self.sha256}}


def _omitted(predicate: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """An aggregate-only predicate's omitted files as (name, sha256); None when malformed."""
    try:
        omitted = msgspec.convert(predicate.get("omitted", []), list[_Omitted], strict=True)
    except msgspec.ValidationError:
        return None
    return tuple((o.name, o.sha256) for o in omitted)


def _predicate_problem(predicate: Mapping[str, Any]) -> str | None:
    """The first predicate field without the shape this tool writes; None if all have it."""
    for key in ("signed", "aggregate_only"):
        if not isinstance(predicate.get(key, False), bool):
            return f"predicate.{key} is not true or false"
    for key in ("state", "summary"):
        if not isinstance(predicate.get(key), dict):
            return f"predicate.{key} is not an object"
    if not isinstance(predicate.get("gates", []), list):
        return "predicate.gates is not a list"
    if not predicate.get("aggregate_only"):
        return None
    if _omitted(predicate) is None:
        return "predicate.omitted is not a list of {name, sha256} strings"
    if not isinstance(predicate.get("source_envelope"), str):
        return "predicate.source_envelope is not a file name"
    return None


def _subjects(subjects: Any, where: str) -> tuple[Subject, ...]:
    """Every subject's record; VerificationError naming the first malformed one."""
    if not isinstance(subjects, list):
        raise VerificationError(f"The statement of {where} is malformed: subject is not a list.")
    parsed = []
    for i, data in enumerate(subjects):
        subject = Subject.from_json(data)
        if subject is None:
            raise VerificationError(f"The statement of {where} is malformed: subject[{i}] is not "
                                    "{name: string, digest: {sha256: 64 hex digits}}.")
        parsed.append(subject)
    return tuple(parsed)


@dataclass(frozen=True)
class Statement:
    """A study result statement: its subjects and its predicate (kept whole, as signed)."""

    subjects: tuple[Subject, ...]
    predicate: Mapping[str, Any]
    omitted: tuple[tuple[str, str], ...] = field(default=())  # aggregate-only: (name, sha256) left out

    @property
    def format_version(self) -> int:
        return int(self.predicate["format_version"])

    @property
    def signed(self) -> bool:
        return bool(self.predicate.get("signed"))

    @property
    def aggregate_only(self) -> bool:
        return bool(self.predicate.get("aggregate_only"))

    @property
    def state(self) -> Mapping[str, Any]:
        return self.predicate["state"]

    @property
    def source_envelope(self) -> str | None:
        return self.predicate.get("source_envelope") if self.aggregate_only else None

    @property
    def digests(self) -> dict[str, str]:
        """name -> sha256 of every subject."""
        return {s.name: s.sha256 for s in self.subjects}

    @classmethod
    def parse(cls, data: Any, where: str) -> Statement:
        """The record of a statement's JSON; VerificationError (naming `where`) when it is not one we read."""
        if not isinstance(data, dict) or data.get("_type") != STATEMENT_TYPE:
            raise VerificationError(f"The payload of {where} is not an in-toto Statement v1.")
        if data.get("predicateType") != PREDICATE_TYPE:
            raise VerificationError(f"{where} has predicate type {data.get('predicateType')!r}; this tool reads {PREDICATE_TYPE}.")
        predicate = check_format(data.get("predicate"), (PREDICATE_FORMAT_VERSION,), f"{where}: predicate")
        subjects = _subjects(data.get("subject"), where)
        problem = _predicate_problem(predicate)
        if problem:
            raise VerificationError(f"The statement of {where} is malformed: {problem}.")
        return cls(subjects, predicate, (_omitted(predicate) or ()) if predicate.get("aggregate_only") else ())

    def to_json(self) -> dict[str, Any]:
        return {"_type": STATEMENT_TYPE, "subject": [s.to_json() for s in self.subjects],
                "predicateType": PREDICATE_TYPE, "predicate": dict(self.predicate)}

    def payload(self) -> bytes:
        """The bytes that are signed: canonical JSON (sorted keys, no spaces, NaN refused)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")

"""The one decoder of a run file's JSON into its record, and the small types records share.

    decode(data, Type, where)   `msgspec.convert` with a failure turned into one EvidenceError line
                                naming the file and msgspec's field path ("… at `$.backends[0]`")
    Record                      the base of every run-file record: frozen, keyword-only, unknown keys
                                refused; `to_json()` is `msgspec.to_builtins(self)` (absent stays absent)
    Unavailable                 `{"available": false, "reason": …}`: what a writer records instead of a
                                value it could not read (a collector, a backend's /health)
    Quoted                      JSON quoted verbatim from another project's document or another
                                process's file (at most 6 levels deep); never read field by field
    Finite, Count, Text         numbers and text bounded in the type

Optional keys a writer sometimes omits are `T | UnsetType = UNSET`, so that a record written back
gives the same keys; numbers a writer wrote as either int or float are `int | float`, so that 1
stays 1 and 1.0 stays 1.0.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..errors import EvidenceError

__all__ = ["UNSET", "Count", "Finite", "Int64", "Number", "Quoted", "Record", "Text", "TritonCacheRef", "Unavailable",
           "UnsetType", "decode",
           "is_set"]

T = TypeVar("T")

Finite = Annotated[float, Meta(ge=-1e300, le=1e300)]  # NaN and infinities are refused by msgspec's bounds
Count = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Int64 = Annotated[int, Meta(ge=-(2**63 - 1), le=2**63 - 1)]
Text = Annotated[str, Meta(max_length=1 << 20)]
Number = Int64 | Finite

_Scalar = str | Int64 | Finite | bool | None
_Q1 = _Scalar | list[_Scalar] | dict[str, _Scalar]
_Q2 = _Scalar | list[_Q1] | dict[str, _Q1]
_Q3 = _Scalar | list[_Q2] | dict[str, _Q2]
_Q4 = _Scalar | list[_Q3] | dict[str, _Q3]
_Q5 = _Scalar | list[_Q4] | dict[str, _Q4]
Quoted = _Scalar | list[_Q5] | dict[str, _Q5]


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A run file (or a part of one) as one frozen value; `to_json()` is what the file holds."""

    def to_json(self) -> dict[str, object]:
        """The dict the file holds: JSON types only (tuples as lists), absent fields left out."""
        data: dict[str, object] = msgspec.json.decode(msgspec.json.encode(self))
        return data


class Unavailable(Record, frozen=True, kw_only=True):
    """What a writer records instead of a value it could not read."""

    available: bool = False
    reason: Text


class TritonCacheRef(Record, frozen=True, kw_only=True):
    """A pinned Triton cache as a recipe declares it: its directory under the inputs root, its tree digest
    (plan.json's declared environment, environment_check.json's declared part)."""

    dir: Text
    sha256: Text


def is_set(value: T | UnsetType) -> bool:
    return value is not UNSET


def decode(data: object, kind: type[T], where: str) -> T:
    """`data` (parsed JSON) as `kind`; EvidenceError naming `where` and the field path otherwise."""
    try:
        return msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise EvidenceError(f"{where}: {_one_line(str(exc))}.") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300].rstrip(".")

"""The record of a tolerances file: the limits `invoke compare` holds a candidate run to.

    format_version: 1
    max_mean_ratio: 1.10          # top-level limits apply to every backend pair
    backends: {hf: hf-new}        # baseline backend -> candidate backend, when the names differ
    per_backend:                  # one baseline backend's limits, replacing the top-level ones key by key
      hf: {max_mean_ratio: 1.3}

`Tolerances.parse` is the one check of such a mapping (keys, types, finite non-negative numbers),
table-driven from `LIMIT_TYPES`; its messages name the file and the key. The result is a frozen
record: `Limits` holds each limit as an attribute (`UNSET` where the file declares none),
`limits_for(backend)` a pair's limits, and `to_json()` is the mapping as parsed (compare records it
in its verdict unchanged: a limit written 3 stays 3, not 3.0).

tolerances format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from ..errors import RecipeError
from .files import check_format

__all__ = ["LIMIT_KEYS", "LIMIT_TYPES", "TOLERANCES_FORMAT_VERSION", "TOLERANCE_KEYS", "Limits", "Tolerances"]

TOLERANCES_FORMAT_VERSION = 1
# Every limit and what it holds: a switch (true or false) or a finite number >= 0.
LIMIT_TYPES: dict[str, type] = {"max_mean_ratio": float, "min_mean_ratio": float, "max_p95_ratio": float,
                                "max_probability_delta": float, "decisions_must_match": bool, "weights_must_match": bool}
LIMIT_KEYS = frozenset(LIMIT_TYPES)
TOLERANCE_KEYS = frozenset({"format_version", "backends", "per_backend", *LIMIT_KEYS})

Number = int | float  # as the file wrote it


class Limits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Declared limits; a limit the file does not declare is UNSET (and is not checked)."""

    max_mean_ratio: Number | UnsetType = UNSET  # candidate mean / baseline mean at most this
    min_mean_ratio: Number | UnsetType = UNSET  # ... and at least this (much faster is a finding too)
    max_p95_ratio: Number | UnsetType = UNSET  # candidate / baseline JevBench P95 at most this
    max_probability_delta: Number | UnsetType = UNSET  # largest |p_candidate - p_baseline| of a case
    decisions_must_match: bool | UnsetType = UNSET
    weights_must_match: bool | UnsetType = UNSET

    @classmethod
    def parse(cls, data: dict, path: Path | str, where: str = "") -> Limits:
        """The limits among a mapping's keys (other keys are the caller's), each checked against LIMIT_TYPES."""
        for key in sorted(LIMIT_KEYS & set(data)):
            problem = _limit_problem(key, data[key])
            if problem:
                raise RecipeError(f"{path}: {where}{problem}")
        return msgspec.convert({k: v for k, v in data.items() if k in LIMIT_KEYS}, cls)

    def replaced_by(self, own: Limits) -> Limits:
        """These limits with `own` replacing them key by key (a backend's per_backend limits)."""
        return msgspec.structs.replace(self, **own.declared())

    def declared(self) -> dict[str, Number | bool]:
        """The declared limits by name (what the file holds)."""
        return msgspec.to_builtins(self)

    def to_json(self) -> dict[str, Number | bool]:
        return self.declared()


def _limit_problem(key: str, value: object) -> str | None:
    if LIMIT_TYPES[key] is bool:
        return None if isinstance(value, bool) else f"{key} must be true or false, not {value!r}."
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return f"{key} must be a finite number >= 0, not {value!r}."
    return None


def _backends(mapping: object, path: Path | str) -> dict[str, str]:
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise RecipeError(f"{path}: backends maps a baseline backend name to a candidate backend name "
                          "(e.g. backends: {hf: hf-new}).")
    return dict(mapping)


def _per_backend(per_backend: object, path: Path | str) -> dict[str, Limits]:
    if not isinstance(per_backend, dict) or not all(isinstance(n, str) for n in per_backend):
        raise RecipeError(f"{path}: per_backend maps a baseline backend name to its limits.")
    out = {}
    for name, limits in per_backend.items():
        if not isinstance(limits, dict) or not limits:
            raise RecipeError(f"{path}: per_backend.{name} is a mapping of limits ({', '.join(sorted(LIMIT_KEYS))}).")
        unknown = sorted(str(k) for k in set(limits) - LIMIT_KEYS)
        if unknown:
            raise RecipeError(f"{path}: per_backend.{name}: unknown keys {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(LIMIT_KEYS))}.")
        out[name] = Limits.parse(limits, path, f"per_backend.{name}.")
    return out


class Tolerances(msgspec.Struct, frozen=True, kw_only=True):
    """A tolerances file: the top-level limits, the backend mapping and each backend's own limits."""

    limits: Limits  # the top-level ones, for every backend pair
    backends: dict[str, str] | UnsetType = UNSET  # baseline backend -> candidate backend
    per_backend: dict[str, Limits] | UnsetType = UNSET
    format_version: int = TOLERANCES_FORMAT_VERSION

    @classmethod
    def parse(cls, data: object, path: Path | str) -> Tolerances:
        """A parsed tolerances mapping, checked (keys, per_backend, limit types); RecipeError naming path."""
        checked = check_format(data, (TOLERANCES_FORMAT_VERSION,), f"{path} (a tolerances file)")
        unknown = sorted(str(k) for k in set(checked) - TOLERANCE_KEYS)
        if unknown:
            raise RecipeError(f"{path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(TOLERANCE_KEYS))}.")
        mapping, per_backend = checked.get("backends", UNSET), checked.get("per_backend", UNSET)
        return cls(limits=Limits.parse(checked, path),
                   backends=UNSET if mapping is UNSET else _backends(mapping, path),
                   per_backend=UNSET if per_backend is UNSET else _per_backend(per_backend, path),
                   format_version=checked["format_version"])

    def candidate_for(self, baseline_backend: str) -> str | None:
        """The candidate backend a baseline backend pairs with: the one `backends` maps it to, else its namesake;
        None for a mapping target not mapped itself (it pairs only with what is mapped to it)."""
        mapping = self.backends or {}
        if baseline_backend in mapping:
            return mapping[baseline_backend]
        return None if baseline_backend in mapping.values() else baseline_backend

    def limits_for(self, baseline_backend: str) -> Limits:
        """The top-level limits with the backend's own (per_backend) replacing them key by key."""
        own = (self.per_backend or {}).get(baseline_backend)
        return self.limits.replaced_by(own) if own is not None else self.limits

    def to_json(self) -> dict[str, object]:
        """The mapping as parsed."""
        return {"format_version": self.format_version, **self.limits.to_json(),
                **({} if self.backends is UNSET else {"backends": self.backends}),
                **({} if self.per_backend is UNSET else
                   {"per_backend": {name: limits.to_json() for name, limits in self.per_backend.items()}})}

"""The record of a tolerances file: the limits `invoke compare` holds a candidate run to.

    format_version: 1
    max_mean_ratio: 1.10          # top-level limits apply to every backend pair
    backends: {hf: hf-new}        # baseline backend -> candidate backend, when the names differ
    per_backend:                  # one baseline backend's limits, replacing the top-level ones key by key
      hf: {max_mean_ratio: 1.3}

`Tolerances.parse` is the one check of such a mapping (keys, types, finite non-negative numbers),
table-driven from `LIMIT_TYPES`; its messages name the file and the key. `to_json()` is the mapping
as parsed (compare records it in its verdict unchanged), `limits_for(backend)` a pair's limits.

tolerances format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from .files import check_format

__all__ = ["LIMIT_KEYS", "LIMIT_TYPES", "TOLERANCES_FORMAT_VERSION", "TOLERANCE_KEYS", "Limits", "Tolerances"]

TOLERANCES_FORMAT_VERSION = 1
# Every limit and what it holds: a switch (true or false) or a finite number >= 0.
LIMIT_TYPES: dict[str, type] = {"max_mean_ratio": float, "min_mean_ratio": float, "max_p95_ratio": float,
                                "max_probability_delta": float, "decisions_must_match": bool, "weights_must_match": bool}
LIMIT_KEYS = frozenset(LIMIT_TYPES)
TOLERANCE_KEYS = frozenset({"format_version", "backends", "per_backend", *LIMIT_KEYS})


def _limit_problem(key: str, value: Any) -> str | None:
    if LIMIT_TYPES[key] is bool:
        return None if isinstance(value, bool) else f"{key} must be true or false, not {value!r}."
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return f"{key} must be a finite number >= 0, not {value!r}."
    return None


@dataclass(frozen=True)
class Limits:
    """Declared limits by key, in the file's order (only the declared ones)."""

    values: Mapping[str, float | bool] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Limits:
        """The limits among a mapping's keys (other keys ignored), unchecked."""
        return cls({k: v for k, v in data.items() if k in LIMIT_KEYS})

    @classmethod
    def parse(cls, data: Mapping[str, Any], path: Path | str, where: str = "") -> Limits:
        for key in sorted(LIMIT_KEYS & set(data)):
            problem = _limit_problem(key, data[key])
            if problem:
                raise RecipeError(f"{path}: {where}{problem}")
        return cls.of(data)

    def replaced_by(self, own: Limits) -> Limits:
        """These limits with `own` replacing them key by key (a backend's per_backend limits)."""
        return Limits({**self.values, **own.values})

    def to_json(self) -> dict[str, float | bool]:
        return dict(self.values)


def _backends(mapping: Any, path: Path | str) -> dict[str, str]:
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise RecipeError(f"{path}: backends maps a baseline backend name to a candidate backend name "
                          "(e.g. backends: {hf: hf-new}).")
    return dict(mapping)


def _per_backend(per_backend: Any, path: Path | str) -> dict[str, Limits]:
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


@dataclass(frozen=True)
class Tolerances:
    limits: Limits  # the top-level ones, for every backend pair
    backends: Mapping[str, str] = field(default_factory=dict)  # baseline backend -> candidate backend
    per_backend: Mapping[str, Limits] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)  # the mapping as parsed
    format_version: int = TOLERANCES_FORMAT_VERSION

    @classmethod
    def parse(cls, data: Any, path: Path | str) -> Tolerances:
        """A parsed tolerances mapping, checked (keys, per_backend, limit types); RecipeError naming path."""
        check_format(data, (TOLERANCES_FORMAT_VERSION,), f"{path} (a tolerances file)")
        unknown = sorted(str(k) for k in set(data) - TOLERANCE_KEYS)
        if unknown:
            raise RecipeError(f"{path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(TOLERANCE_KEYS))}.")
        limits = Limits.parse(data, path)
        backends = _backends(data.get("backends", {}), path)
        return cls(limits, backends, _per_backend(data.get("per_backend", {}), path), data, data["format_version"])

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Tolerances:
        """The record of a mapping without checking it (a caller's own limits, e.g. tests passing a dict)."""
        per_backend = data.get("per_backend") or {}
        return cls(Limits.of(data), dict(data.get("backends") or {}),
                   {name: Limits.of(limits or {}) for name, limits in per_backend.items()}, data,
                   data.get("format_version", TOLERANCES_FORMAT_VERSION))

    def limits_for(self, baseline_backend: str) -> Limits:
        """The top-level limits with the backend's own (per_backend) replacing them key by key."""
        own = self.per_backend.get(baseline_backend)
        return self.limits.replaced_by(own) if own is not None else self.limits

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw)

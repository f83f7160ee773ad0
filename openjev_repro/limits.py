"""Limits on what the tools read: JSON depth, bundle size and members, passes, repeats and timeouts.

Every reader of untrusted bytes (envelopes, bundles, recipes, request bodies) checks these
before it spends memory or time on the input, and reports a breach as one sentence.
docs/security.md lists them (YAML aliases are refused outright: `study.recipe.NoAliasLoader`).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "MAX_BUNDLE_BYTES",
    "MAX_BUNDLE_MEMBERS",
    "MAX_JSON_DEPTH",
    "MAX_PASSES",
    "MAX_REPEAT",
    "MAX_TIMEOUT_S",
    "JsonLimitError",
    "NonFiniteNumber",
    "has_lone_surrogate",
    "json_depth",
    "loads_bounded",
]

MAX_JSON_DEPTH = 64  # nesting of objects and arrays in an envelope, statement or request body
MAX_BUNDLE_BYTES = 1 << 30  # 1 GiB of extracted content, summed over members (from the headers)
MAX_BUNDLE_MEMBERS = 10_000
MAX_PASSES = 1_000  # feasibility or measured passes of one workload
MAX_REPEAT = 10_000  # repeats of each selected request
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: any longer timeout is a typo


class JsonLimitError(ValueError):
    """JSON nested deeper than allowed (a ValueError, like json's own errors)."""


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), computed without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            deepest = max(deepest, depth + 1)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
            deepest = max(deepest, depth + 1)
    return deepest


class NonFiniteNumber(ValueError):
    """A NaN or Infinity literal, or a number that overflows to infinity (not standard JSON)."""


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(f"the literal {name} (not standard JSON)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise NonFiniteNumber(f"the number {text[:40]} (overflows to infinity)")
    return value


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH, *, finite: bool = False) -> Any:
    """json.loads with a depth bound; every failure (depth, huge ints, syntax) is a ValueError.

    finite=True also refuses NaN/Infinity literals and numbers overflowing to infinity (NonFiniteNumber)."""
    strict: dict[str, Any] = {"parse_constant": _refuse_constant, "parse_float": _finite_float} if finite else {}
    try:
        value = json.loads(text, **strict)
    except RecursionError:
        raise JsonLimitError(f"JSON nested deeper than {max_depth} levels") from None
    if json_depth(value) > max_depth:
        raise JsonLimitError(f"JSON nested deeper than {max_depth} levels")
    return value


def has_lone_surrogate(value: Any) -> bool:
    """True when any string (key or value) of parsed JSON cannot be encoded as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


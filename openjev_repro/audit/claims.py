"""Claims files: the figures a published report states, and how the derived ones follow.

A claims file (YAML, format_version 1 or 2) has base `figures` (as printed) and `claims`,
each a stated figure with a declared derivation from earlier figures or claims:

    format_version: 2
    report: open-jev-h200-validation-2026-10.txt
    experiment: Raw HF Transformers comparison, 2026-10-03
    figures:
      native.mean.pass1: {value: "48.471", unit: ms, where: "table, Mean pass 1"}
    claims:
      - name: native.mean
        value: "48.503"
        derive: mean_of
        from: [native.mean.pass1, native.mean.pass2]

Values are strings so the printed decimals survive YAML (362.180 stays three decimals);
numbers and booleans are accepted too. Each claim is recomputed from the printed figures
with exact decimal arithmetic and rounded half-up to the claim's decimals: equal is
`exact`. Otherwise it is a `mismatch`, and the check also says whether the printed value
is still reachable when every input may have been anywhere inside its own rounding
interval. A claim that selects or restates an input (`rounded`, `max`, `min`, `median`,
`percentile`) may not print more decimals than its inputs do: 0.063 restated as "0.06300"
is a mismatch. A published figure that does not reproduce is a finding: the claims file
keeps it with `expect: mismatch` and a `finding:` sentence, so the file records the report
as printed; `invoke claims` fails on any undeclared mismatch and on a declared one that now
reproduces.

Format history:
    1  (2026-11) first version.
    2  (2026-12) adds `max`, `min`, `range`, `median`, `percentile` (with `q` and `rule`),
       n-ary `product` and `difference` (first minus the rest). In both versions
       `at_least`/`at_most` hold for every member of a group, and `rounded` refuses a
       stated value with more decimals than its input.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from ..evidence.recipe import read_yaml

__all__ = [
    "BOOLEAN_DERIVATIONS",
    "CLAIMS_FORMAT_VERSION",
    "CLAIMS_FORMAT_VERSIONS",
    "DERIVATIONS",
    "ClaimResult",
    "Figure",
    "check_claims",
    "format_results",
    "load_claims",
    "parse_claims",
]

CLAIMS_FORMAT_VERSION = 2  # written by this version; every version in CLAIMS_FORMAT_VERSIONS is read
CLAIMS_FORMAT_VERSIONS = (1, 2)
PERCENTILE_RULES = ("nearest_rank", "jevbench")
_CORNER_LIMIT = 10  # up to this many inputs, rounding bounds come from every corner of the input box


@dataclass(frozen=True)
class Figure:
    name: str
    value: Decimal | bool
    decimals: int  # printed decimals; 0 for integers and booleans
    unit: str = ""
    where: str = ""


@dataclass(frozen=True)
class ClaimResult:
    name: str
    derive: str
    stated: str
    recomputed: str
    status: str  # exact | mismatch
    within_rounding: bool  # the stated value is reachable from the inputs' rounding intervals
    expected_mismatch: bool
    finding: str
    where: str
    detail: str = ""  # why a claim is refused beyond its value (e.g. more decimals than supported)

    @property
    def failed(self) -> bool:
        return (self.status == "mismatch") != self.expected_mismatch


Values = list[Decimal]


def _mean(xs: Values, _: dict) -> Decimal: return sum(xs, Decimal(0)) / len(xs)
def _ratio(xs: Values, _: dict) -> Decimal: return xs[0] / xs[1]
def _percent_lower(xs: Values, _: dict) -> Decimal: return (xs[0] - xs[1]) / xs[0] * 100
def _percent_gap_closed(xs: Values, _: dict) -> Decimal: return (xs[0] - xs[1]) / (xs[0] - xs[2]) * 100
def _difference(xs: Values, _: dict) -> Decimal: return xs[0] - sum(xs[1:])
def _spread(xs: Values, _: dict) -> Decimal: return max(xs) - min(xs)
def _same(xs: Values, _: dict) -> Decimal: return xs[0]
def _sum(xs: Values, _: dict) -> Decimal: return sum(xs, Decimal(0))
def _max(xs: Values, _: dict) -> Decimal: return max(xs)
def _min(xs: Values, _: dict) -> Decimal: return min(xs)


def _product(xs: Values, _: dict) -> Decimal:
    out = Decimal(1)
    for x in xs:
        out *= x
    return out


def _median(xs: Values, _: dict) -> Decimal:
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def percentile_index(n: int, q: Decimal, rule: str) -> int:
    """0-based index into the sorted values: nearest rank ceil(q/100*N)-1, or JevBench's int(q/100*N)-1.

    Both use the binary float q/100*N exactly as the upstream expressions do (see
    ../shared/facts/upstream.md); JevBench's rank of a single value is index -1, that value.
    """
    share = float(q) / 100 * n
    return math.ceil(share) - 1 if rule == "nearest_rank" else int(share) - 1


def _percentile(xs: Values, claim: dict) -> Decimal:
    return sorted(xs)[percentile_index(len(xs), Decimal(str(claim["q"])), claim["rule"])]


# name -> (function, least inputs, most inputs or None, format version that introduced it, description)
DERIVATIONS: dict[str, tuple[Callable[[Values, dict], Decimal], int, int | None, int, str]] = {
    "mean_of": (_mean, 1, None, 1, "arithmetic mean (overall mean of equal-sized passes)"),
    "ratio": (_ratio, 2, 2, 1, "a / b (speedup = baseline mean / candidate mean)"),
    "percent_lower": (_percent_lower, 2, 2, 1, "(baseline - candidate) / baseline * 100"),
    "percent_gap_closed": (_percent_gap_closed, 3, 3, 1, "(before - after) / (before - target) * 100"),
    "difference": (_difference, 2, None, 1, "first - second - ... (version 1: exactly two)"),
    "spread": (_spread, 1, None, 1, "max - min (pass-to-pass spread)"),
    "rounded": (_same, 1, 1, 1, "the same figure printed with fewer decimals"),
    "product": (_product, 2, None, 1, "a * b * ... (version 1: exactly two)"),
    "sum": (_sum, 1, None, 1, "a + b + ..."),
    "max": (_max, 1, None, 2, "the largest listed value"),
    "min": (_min, 1, None, 2, "the smallest listed value"),
    "range": (_spread, 1, None, 2, "max - min of the listed values"),
    "median": (_median, 1, None, 2, "the middle value (mean of the two middle values for an even count)"),
    "percentile": (_percentile, 1, None, 2, "sorted[rank] with `q` and `rule`: nearest_rank or jevbench"),
}
BOOLEAN_DERIVATIONS = {
    "disjoint_ranges": "the [min, max] ranges of the two groups do not overlap",
    "all_below": "every figure of the first group is below every figure of the second",
    "at_least": "a >= b for every member of whichever side is a group (one side at most)",
    "at_most": "a <= b for every member of whichever side is a group (one side at most)",
}
_VERSION_1_ARITY = {"difference": 2, "product": 2}
_SELECTING = {"rounded", "max", "min", "percentile", "median"}  # may not print more decimals than their inputs
_INCREASING = {"mean_of", "sum", "max", "min", "median", "percentile", "rounded"}  # in every input


def _figure(name: str, spec: Any, where: str) -> Figure:
    if not isinstance(spec, dict):
        spec = {"value": spec}
    raw = spec.get("value")
    if isinstance(raw, bool):
        return Figure(name, raw, 0, spec.get("unit", ""), spec.get("where", ""))
    text = str(raw).replace(",", "")
    try:
        value = Decimal(text)
        if not value.is_finite():
            raise ValueError(text)
    except (InvalidOperation, ValueError):
        raise RecipeError(f"{where}: figure {name!r} has value {raw!r}, which is not a number; quote it as printed.") from None
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    decimals = max(-exponent, 0) if isinstance(raw, str) else int(spec.get("decimals", 0) or max(-exponent, 0))
    return Figure(name, value, decimals, spec.get("unit", ""), spec.get("where", ""))


def _groups(inputs: Any, where: str, kind: str) -> list[list[str]]:
    if not isinstance(inputs, list) or not inputs:
        raise RecipeError(f"{where}: `from` is a list of figure names (or, for booleans, of groups).")
    groups = [g if isinstance(g, list) else [g] for g in inputs]
    if any(not isinstance(n, str) for g in groups for n in g):
        raise RecipeError(f"{where}: `from` holds something other than figure names.")
    if kind in DERIVATIONS and any(isinstance(g, list) for g in inputs):
        raise RecipeError(f"{where}: {kind} takes a flat list of figures; groups are for "
                          f"{', '.join(sorted(BOOLEAN_DERIVATIONS))}.")
    return groups


def _check_arity(kind: str, claim: dict, groups: list[list[str]], version: int, where: str) -> None:
    inputs = claim["from"]
    if kind in DERIVATIONS:
        _, least, most, introduced, _ = DERIVATIONS[kind]
        if introduced > version:
            raise RecipeError(f"{where}: {kind} needs format_version {introduced}.")
        if version == 1 and kind in _VERSION_1_ARITY:
            most = _VERSION_1_ARITY[kind]
            if len(inputs) > most:
                raise RecipeError(f"{where}: {kind} takes {most} figures in format_version 1, got {len(inputs)}; "
                                  "n-ary needs format_version 2.")
        if len(inputs) < least or (most is not None and len(inputs) > most):
            count = f"{least}" if least == most else f"at least {least}" if most is None else f"{least} to {most}"
            raise RecipeError(f"{where}: {kind} takes {count} figures, got {len(inputs)}.")
        if kind == "percentile":
            _check_percentile(claim, len(inputs), where)
        elif "q" in claim or "rule" in claim:
            raise RecipeError(f"{where}: q and rule belong to percentile, not {kind}.")
        return
    if len(groups) != 2:
        raise RecipeError(f"{where}: {kind} compares two sides, got {len(groups)}; write [a, b] or [[a, c], b].")
    if kind in ("at_least", "at_most") and all(isinstance(g, list) and len(g) > 1 for g in inputs):
        raise RecipeError(f"{where}: {kind} between two groups is ambiguous (pairwise or every pair?); "
                          "make one side a single figure, or use all_below.")


def _check_percentile(claim: dict, n: int, where: str) -> None:
    rule, q = claim.get("rule"), claim.get("q")
    if rule not in PERCENTILE_RULES:
        raise RecipeError(f"{where}: percentile needs rule: {' or '.join(PERCENTILE_RULES)}, got {rule!r}.")
    try:
        q_value = Decimal(str(q))
    except InvalidOperation:
        q_value = Decimal("NaN")
    if isinstance(q, bool) or not q_value.is_finite() or not 0 < q_value <= 100:
        raise RecipeError(f"{where}: percentile needs q in (0, 100], got {q!r}.")
    index = percentile_index(n, q_value, rule)
    if not (0 <= index < n or (index == -1 and n == 1)):
        raise RecipeError(f"{where}: the {rule} rank of q={q} over {n} values is index {index}, outside the list.")


def parse_claims(data: Any, source: str = "<claims>") -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format_version") not in CLAIMS_FORMAT_VERSIONS:
        raise RecipeError(f"{source}: not a claims file with format_version "
                          f"{' or '.join(map(str, CLAIMS_FORMAT_VERSIONS))}.")
    version = int(data["format_version"])
    raw_figures = data.get("figures") or {}
    if not isinstance(raw_figures, dict):
        raise RecipeError(f"{source}: figures is a mapping of name to value.")
    figures = {str(name): _figure(str(name), spec, source) for name, spec in raw_figures.items()}
    claims = []
    raw_claims = data.get("claims") or []
    if not isinstance(raw_claims, list):
        raise RecipeError(f"{source}: claims is a list.")
    for i, claim in enumerate(raw_claims):
        where = f"{source}: claims[{i}]"
        if not isinstance(claim, dict) or "name" not in claim or "derive" not in claim:
            raise RecipeError(f"{where}: each claim needs name, value, derive and from.")
        kind = claim["derive"]
        if kind not in DERIVATIONS and kind not in BOOLEAN_DERIVATIONS:
            raise RecipeError(f"{where}: unknown derivation {kind!r}; known: "
                              f"{', '.join(sorted([*DERIVATIONS, *BOOLEAN_DERIVATIONS]))}.")
        groups = _groups(claim.get("from"), where, kind)
        flat = [n for g in groups for n in g]
        missing = [n for n in flat if n not in figures]
        if missing:
            raise RecipeError(f"{where}: {claim['name']} derives from unknown figures {missing}; "
                              "declare them under figures or as an earlier claim.")
        _check_arity(kind, claim, groups, version, where)
        if claim["name"] in figures:
            raise RecipeError(f"{where}: {claim['name']!r} is declared twice.")
        stated = _figure(claim["name"], claim, where)
        if (kind in BOOLEAN_DERIVATIONS) != isinstance(stated.value, bool):
            expected = "true or false" if kind in BOOLEAN_DERIVATIONS else "a number"
            raise RecipeError(f"{where}: {kind} states {expected}.")
        if kind not in BOOLEAN_DERIVATIONS and any(isinstance(figures[n].value, bool) for n in flat):
            raise RecipeError(f"{where}: {kind} derives from a true/false figure.")
        figures[claim["name"]] = stated
        claims.append(claim)
    return {"meta": {k: data.get(k) for k in ("report", "experiment")}, "figures": figures, "claims": claims,
            "format_version": version}


def load_claims(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "claims file")
    return parse_claims(data, str(path))


def _round(value: Decimal, decimals: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def _half(f: Figure) -> Decimal:
    return Decimal(5).scaleb(-f.decimals - 1)


def _boolean(kind: str, groups: list[list[Decimal]]) -> bool:
    if kind == "disjoint_ranges":
        a, b = groups
        return max(a) < min(b) or max(b) < min(a)
    if kind == "all_below":
        return max(groups[0]) < min(groups[1])
    a, b = groups  # one side is one figure: it must hold against every member of the other
    return all(x >= y if kind == "at_least" else x <= y for x in a for y in b)


def _bounds(kind: str, function: Callable[[Values, dict], Decimal], inputs: list[Figure],
            claim: dict) -> tuple[Decimal, Decimal]:
    """The least and greatest value the derivation takes when each input lies in its rounding interval."""
    lo_in = [f.value - _half(f) for f in inputs]
    hi_in = [f.value + _half(f) for f in inputs]
    if kind in ("spread", "range"):
        return max(Decimal(0), max(lo_in) - min(hi_in)), max(hi_in) - min(lo_in)
    if kind in _INCREASING or (kind == "product" and min(lo_in) >= 0):
        return function(lo_in, claim), function(hi_in, claim)
    if kind == "difference" and len(inputs) > _CORNER_LIMIT:
        return function(lo_in[:1] + hi_in[1:], claim), function(hi_in[:1] + lo_in[1:], claim)
    corners = [function([hi if s > 0 else lo for lo, hi, s in zip(lo_in, hi_in, signs, strict=True)], claim)
               for signs in itertools.product((-1, 1), repeat=len(inputs))]
    return min(corners), max(corners)


def _check(claim: dict, figures: dict[str, Figure]) -> ClaimResult:
    kind, stated = claim["derive"], figures[claim["name"]]
    common = {"name": claim["name"], "derive": kind, "expected_mismatch": claim.get("expect") == "mismatch",
              "finding": str(claim.get("finding", "")), "where": str(claim.get("where", ""))}
    if kind in BOOLEAN_DERIVATIONS:
        groups = [[figures[n].value for n in (g if isinstance(g, list) else [g])] for g in claim["from"]]
        got = _boolean(kind, groups)  # type: ignore[arg-type]
        ok = got == stated.value
        return ClaimResult(stated=str(stated.value).lower(), recomputed=str(got).lower(),
                           status="exact" if ok else "mismatch", within_rounding=ok, **common)
    function = DERIVATIONS[kind][0]
    inputs = [figures[n] for n in claim["from"]]
    with localcontext() as ctx:
        ctx.prec = 50
        exact = function([f.value for f in inputs], claim)  # type: ignore[misc]
        lo, hi = _bounds(kind, function, inputs, claim)
    recomputed = _round(exact, stated.decimals)
    reachable = not (hi < stated.value - _half(stated) or lo > stated.value + _half(stated))
    status = "exact" if recomputed == stated.value else "mismatch"
    detail = ""
    supported = max(f.decimals for f in inputs) + (1 if kind == "median" and len(inputs) % 2 == 0 else 0)
    if kind in _SELECTING and stated.decimals > supported:
        status, reachable = "mismatch", False
        detail = (f"states {stated.decimals} decimals; {kind} of inputs printed with at most "
                  f"{max(f.decimals for f in inputs)} supports {supported}")
    return ClaimResult(stated=str(stated.value), recomputed=str(recomputed), status=status,
                       within_rounding=reachable, detail=detail, **common)


def check_claims(parsed: dict[str, Any]) -> list[ClaimResult]:
    return [_check(claim, parsed["figures"]) for claim in parsed["claims"]]


def format_results(results: list[ClaimResult]) -> str:
    width = max((len(r.name) for r in results), default=0)
    lines = []
    for r in results:
        if r.status == "exact":
            mark = "STALE " if r.expected_mismatch else "OK    "
        else:
            mark = "FINDING" if r.expected_mismatch else "FAIL  "
        if r.detail:
            note = f" ({r.detail})"
        elif r.status == "exact":
            note = ""
        else:
            note = (" (reachable within the inputs' rounding)" if r.within_rounding
                    else " (not reachable even within rounding)")
        line = f"{mark} {r.name.ljust(width)}  {r.derive:<18} stated {r.stated:>10}  recomputed {r.recomputed:>10}{note}"
        if r.finding:
            line += f"\n        finding: {r.finding}"
        lines.append(line)
    failed = sum(r.failed for r in results)
    findings = sum(1 for r in results if r.status == "mismatch" and r.expected_mismatch)
    lines.append(f"{len(results)} claims: {failed} failed, {findings} declared findings.")
    return "\n".join(lines)

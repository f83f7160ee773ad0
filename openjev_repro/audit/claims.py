"""Claims files: the figures a published report states, and how the derived ones follow.

A claims file (YAML, format_version 1) has base `figures` (as printed) and `claims`, each a
stated figure with a declared derivation from earlier figures or claims:

    format_version: 1
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
interval (evaluated at the interval corners; every derivation here is monotone in each
argument). A published figure that does not reproduce is a finding: the claims file keeps
it with `expect: mismatch` and a `finding:` sentence, so the file records the report as
printed; `invoke claims` fails on any undeclared mismatch and on a declared one that now
reproduces.

Format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import Any, Callable


from ..errors import RecipeError
from ..recipe import read_yaml

__all__ = ["CLAIMS_FORMAT_VERSION", "DERIVATIONS", "Figure", "ClaimResult", "load_claims", "parse_claims",
           "check_claims", "format_results"]

CLAIMS_FORMAT_VERSION = 1


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

    @property
    def failed(self) -> bool:
        return (self.status == "mismatch") != self.expected_mismatch


def _mean(xs): return sum(xs) / len(xs)
def _ratio(xs): return xs[0] / xs[1]
def _percent_lower(xs): return (xs[0] - xs[1]) / xs[0] * 100
def _percent_gap_closed(xs): return (xs[0] - xs[1]) / (xs[0] - xs[2]) * 100
def _difference(xs): return xs[0] - xs[1]
def _spread(xs): return max(xs) - min(xs)
def _same(xs): return xs[0]
def _product(xs): return xs[0] * xs[1]
def _sum(xs): return sum(xs)


# name -> (function of the input values, number of inputs or None for any, description)
DERIVATIONS: dict[str, tuple[Callable[[list], Any], int | None, str]] = {
    "mean_of": (_mean, None, "arithmetic mean (overall mean of equal-sized passes)"),
    "ratio": (_ratio, 2, "a / b (speedup = baseline mean / candidate mean)"),
    "percent_lower": (_percent_lower, 2, "(baseline - candidate) / baseline * 100"),
    "percent_gap_closed": (_percent_gap_closed, 3, "(before - after) / (before - target) * 100"),
    "difference": (_difference, 2, "a - b (memory differences)"),
    "spread": (_spread, None, "max - min (pass-to-pass spread)"),
    "rounded": (_same, 1, "the same figure printed with fewer decimals"),
    "product": (_product, 2, "a * b (counts)"),
    "sum": (_sum, None, "a + b + ... (counts)"),
}
BOOLEAN_DERIVATIONS = {
    "disjoint_ranges": "the [min, max] ranges of the two groups do not overlap",
    "all_below": "every figure of the first group is below every figure of the second",
    "at_least": "a >= b (a gate threshold)",
    "at_most": "a <= b (a gate threshold)",
}


def _figure(name: str, spec: Any, where: str) -> Figure:
    if not isinstance(spec, dict):
        spec = {"value": spec}
    raw = spec.get("value")
    if isinstance(raw, bool):
        return Figure(name, raw, 0, spec.get("unit", ""), spec.get("where", ""))
    text = str(raw).replace(",", "")
    try:
        value = Decimal(text)
    except Exception:
        raise RecipeError(f"{where}: figure {name!r} has value {raw!r}, which is not a number; quote it as printed.") from None
    decimals = max(-value.as_tuple().exponent, 0) if isinstance(raw, str) else int(spec.get("decimals", 0) or
                                                                                      max(-value.as_tuple().exponent, 0))
    return Figure(name, value, decimals, spec.get("unit", ""), spec.get("where", ""))


def parse_claims(data: Any, source: str = "<claims>") -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format_version") != CLAIMS_FORMAT_VERSION:
        raise RecipeError(f"{source}: not a claims file with format_version {CLAIMS_FORMAT_VERSION}.")
    figures = {name: _figure(name, spec, source) for name, spec in (data.get("figures") or {}).items()}
    claims = []
    for i, claim in enumerate(data.get("claims") or []):
        where = f"{source}: claims[{i}]"
        if not isinstance(claim, dict) or "name" not in claim or "derive" not in claim:
            raise RecipeError(f"{where}: each claim needs name, value, derive and from.")
        kind = claim["derive"]
        if kind not in DERIVATIONS and kind not in BOOLEAN_DERIVATIONS:
            raise RecipeError(f"{where}: unknown derivation {kind!r}; known: "
                              f"{', '.join(sorted([*DERIVATIONS, *BOOLEAN_DERIVATIONS]))}.")
        inputs = claim.get("from")
        flat = [n for group in inputs for n in (group if isinstance(group, list) else [group])] if inputs else []
        missing = [n for n in flat if n not in figures]
        if missing or not flat:
            raise RecipeError(f"{where}: {claim['name']} derives from unknown figures {missing or '(none)'}; "
                              "declare them under figures or as an earlier claim.")
        arity = DERIVATIONS.get(kind, (None, None))[1]
        if arity is not None and len(inputs) != arity:
            raise RecipeError(f"{where}: {kind} takes {arity} figures, got {len(inputs)}.")
        if claim["name"] in figures:
            raise RecipeError(f"{where}: {claim['name']!r} is declared twice.")
        figures[claim["name"]] = _figure(claim["name"], claim, where)
        claims.append(claim)
    return {"meta": {k: data.get(k) for k in ("report", "experiment")}, "figures": figures, "claims": claims}


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
    a, b = groups[0][0], groups[1][0]
    return a >= b if kind == "at_least" else a <= b


def _check(claim: dict, figures: dict[str, Figure]) -> ClaimResult:
    kind, stated = claim["derive"], figures[claim["name"]]
    common = dict(name=claim["name"], derive=kind, expected_mismatch=claim.get("expect") == "mismatch",
                  finding=str(claim.get("finding", "")), where=str(claim.get("where", "")))
    if kind in BOOLEAN_DERIVATIONS:
        groups = [[figures[n].value for n in (g if isinstance(g, list) else [g])] for g in claim["from"]]
        got = _boolean(kind, groups)
        ok = got == stated.value
        return ClaimResult(stated=str(stated.value).lower(), recomputed=str(got).lower(),
                           status="exact" if ok else "mismatch", within_rounding=ok, **common)
    function = DERIVATIONS[kind][0]
    inputs = [figures[n] for n in claim["from"]]
    with localcontext() as ctx:
        ctx.prec = 50
        exact = function([f.value for f in inputs])
        corners = [function([f.value + s * _half(f) for f, s in zip(inputs, signs)])
                   for signs in itertools.product((-1, 1), repeat=len(inputs))]
    recomputed = _round(exact, stated.decimals)
    lo, hi = min(corners), max(corners)
    reachable = not (hi < stated.value - _half(stated) or lo > stated.value + _half(stated))
    return ClaimResult(stated=str(stated.value), recomputed=str(recomputed),
                       status="exact" if recomputed == stated.value else "mismatch",
                       within_rounding=reachable, **common)


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
        note = "" if r.status == "exact" else (
            " (reachable within the inputs' rounding)" if r.within_rounding else " (not reachable even within rounding)")
        line = f"{mark} {r.name.ljust(width)}  {r.derive:<18} stated {r.stated:>10}  recomputed {r.recomputed:>10}{note}"
        if r.finding:
            line += f"\n        finding: {r.finding}"
        lines.append(line)
    failed = sum(r.failed for r in results)
    findings = sum(1 for r in results if r.status == "mismatch" and r.expected_mismatch)
    lines.append(f"{len(results)} claims: {failed} failed, {findings} declared findings.")
    return "\n".join(lines)

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
    3  (2026-12) adds `percent_change` ((b - a) / a * 100, signed), `relative_range`
       ((max - min) / mean * 100), `rank` (1 + how many of the others are lower, or higher
       with `order: descending`), and the true/false `within` (|a - b| <= `tolerance`),
       `all`/`any` (every / some member of a group `op` a bound) and `and` (of earlier
       true/false claims or figures). Every key is checked (an unknown one is an error);
       every figure and numeric claim declares its `unit`, and units are checked; each claim
       names the `printed` text it checks, which must show the stated value, and no two claims
       state the same printed text; a signed zero (-0.00) keeps its sign; rounding
       reachability carries through chains (a claim used as an input lies in its own
       reachable interval, not only in its printed one).

Every version: values are bounded (at most 24 significant digits, 20 decimals, magnitude
below 10**24; at most 10,000 figures per claim and claims per file), every operator checks
its domain (a division by zero is one error naming the claim), and evaluation is bounded:
rounding bounds of many inputs come from interval arithmetic, not from every corner.
"""

from __future__ import annotations

import itertools
import math
import re
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

CLAIMS_FORMAT_VERSION = 3  # written by this version; every version in CLAIMS_FORMAT_VERSIONS is read
CLAIMS_FORMAT_VERSIONS = (1, 2, 3)
MAX_DIGITS = 24  # significant digits of one value
MAX_DECIMALS = 20
MAX_EXPONENT = 24  # |value| < 10**24
MAX_ITEMS = 10_000  # figures per claim; claims and figures per file
_PRECISION = 80  # decimal digits of every intermediate (the limits above keep every result exact well within it)
_TOP_KEYS = {"format_version", "report", "experiment", "figures", "claims", "source", "notes"}
_FIGURE_KEYS = {"value", "unit", "where", "decimals", "printed"}
_CLAIM_KEYS = {"name", "value", "derive", "from", "where", "expect", "finding", "q", "rule", "unit", "printed",
               "tolerance", "op", "order", "decimals"}
_PERCENT_UNITS = {"%", "percent"}
_RATIO_UNITS = {"x", "×", "", "1"}
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


def _percent_change(xs: Values, _: dict) -> Decimal: return (xs[1] - xs[0]) / xs[0] * 100
def _relative_range(xs: Values, _: dict) -> Decimal: return (max(xs) - min(xs)) / _mean(xs, _) * 100


def _rank(xs: Values, claim: dict) -> Decimal:
    target, others = xs[0], xs[1:]
    if claim.get("order", "ascending") == "descending":
        return Decimal(1 + sum(1 for x in others if x > target))
    return Decimal(1 + sum(1 for x in others if x < target))


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
    "percent_change": (_percent_change, 2, 2, 3, "(b - a) / a * 100, signed: negative when b is below a"),
    "relative_range": (_relative_range, 2, None, 3, "(max - min) / mean * 100 of the listed values"),
    "rank": (_rank, 2, None, 3, "1 + how many of the others are lower (order: descending: higher) than the first"),
}
BOOLEAN_DERIVATIONS = {
    "disjoint_ranges": "the [min, max] ranges of the two groups do not overlap",
    "all_below": "every figure of the first group is below every figure of the second",
    "at_least": "a >= b for every member of whichever side is a group (one side at most)",
    "at_most": "a <= b for every member of whichever side is a group (one side at most)",
    "within": "|a - b| <= tolerance (format 3; `tolerance` in the figures' unit)",
    "all": "every member of the group `op` the bound (format 3; op one of < <= > >=)",
    "any": "at least one member of the group `op` the bound (format 3)",
    "and": "every listed true/false figure or claim is true (format 3)",
}
_BOOLEAN_VERSION = {"within": 3, "all": 3, "any": 3, "and": 3}
# The operators format 3 adds (a test asserts the committed claims-3 files use them).
FORMAT_3_OPERATORS = frozenset({k for k, spec in DERIVATIONS.items() if spec[3] == 3} | set(_BOOLEAN_VERSION))
_OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
_VERSION_1_ARITY = {"difference": 2, "product": 2}
_SELECTING = {"rounded", "max", "min", "percentile", "median"}  # may not print more decimals than their inputs
_INCREASING = {"mean_of", "sum", "max", "min", "median", "percentile", "rounded"}  # in every input


def _number_text(raw: Any) -> str:
    """The value as printed: a string (commas, a leading + and the minus sign U+2212 allowed) or a YAML number."""
    if isinstance(raw, str):
        return raw.strip().replace(",", "").replace("\u2212", "-").lstrip("+")
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)
    return repr(raw)


def _decimal(raw: Any, what: str, where: str) -> Decimal:
    """A finite decimal within the digit, decimal and magnitude limits; RecipeError otherwise."""
    text = _number_text(raw)
    try:
        value = Decimal(text) if len(text) <= 4 * MAX_DIGITS else Decimal("NaN")
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        raise RecipeError(f"{where}: {what} has value {str(raw)[:60]!r}, which is not a number; quote it as printed.")
    digits, exponent = value.as_tuple().digits, value.as_tuple().exponent
    assert isinstance(exponent, int)
    if len(digits) > MAX_DIGITS or -exponent > MAX_DECIMALS or value.adjusted() >= MAX_EXPONENT:
        raise RecipeError(f"{where}: {what} has value {str(raw)[:60]!r}: at most {MAX_DIGITS} significant digits, "
                          f"{MAX_DECIMALS} decimals and a magnitude below 1e{MAX_EXPONENT}.")
    return value


def _text_field(spec: dict, key: str, where: str) -> str:
    value = spec.get(key, "")
    if not isinstance(value, str):
        raise RecipeError(f"{where}: {key} is {type(value).__name__}, not text.")
    return value


def _check_known_keys(name: str, spec: dict, where: str) -> None:
    """Format 3: a figure or claim holds only the keys its kind knows."""
    unknown = sorted(set(map(str, spec)) - (_CLAIM_KEYS if "derive" in spec else _FIGURE_KEYS))
    if unknown:
        raise RecipeError(f"{where}: {name!r} has unknown keys {unknown}.")


def _declared_decimals(name: str, spec: dict, raw: Any, decimals: int, where: str) -> int:
    """The decimals a YAML number declares it was printed with (a quoted value carries its own)."""
    if isinstance(raw, str) or "decimals" not in spec:
        return decimals
    declared = spec["decimals"]
    if not isinstance(declared, int) or isinstance(declared, bool) or not 0 <= declared <= MAX_DECIMALS:
        raise RecipeError(f"{where}: {name!r} decimals {str(declared)[:40]!r} is not an integer in "
                          f"[0, {MAX_DECIMALS}].")
    return declared or decimals


def _figure(name: str, spec: Any, where: str, version: int = 2) -> Figure:
    if not isinstance(spec, dict):
        spec = {"value": spec}
    if version >= 3:
        _check_known_keys(name, spec, where)
    raw = spec.get("value")
    unit, place = _text_field(spec, "unit", where), _text_field(spec, "where", where)
    if isinstance(raw, bool):
        return Figure(name, raw, 0, unit, place)
    value = _decimal(raw, f"figure {name!r}", where)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return Figure(name, value, _declared_decimals(name, spec, raw, max(-exponent, 0), where), unit, place)


_GROUPED = {"ratio", "percent_lower", "percent_change"}  # format 3: a side may be a group, taken as its mean


def _check_from(inputs: Any, groups: list[list[Any]], where: str) -> None:
    if any(not isinstance(n, str) for g in groups for n in g):
        raise RecipeError(f"{where}: `from` holds something other than figure names.")
    if sum(len(g) for g in groups) > MAX_ITEMS:
        raise RecipeError(f"{where}: `from` names more than {MAX_ITEMS} figures.")


def _takes_groups(kind: str, version: int) -> bool:
    """Whether `from` may hold groups: the true/false comparisons, and format 3's grouped sides."""
    return not (kind in DERIVATIONS or kind == "and") or (version >= 3 and kind in _GROUPED)


def _groups(inputs: Any, where: str, kind: str, version: int = 2) -> list[list[str]]:
    if not isinstance(inputs, list) or not inputs:
        raise RecipeError(f"{where}: `from` is a list of figure names (or, for booleans, of groups).")
    groups = [g if isinstance(g, list) else [g] for g in inputs]
    _check_from(inputs, groups, where)
    if not _takes_groups(kind, version) and any(isinstance(g, list) for g in inputs):
        raise RecipeError(f"{where}: {kind} takes a flat list of figures; groups are for "
                          f"{', '.join(sorted(set(BOOLEAN_DERIVATIONS) - {'and'}))}.")
    return groups


def _check_arity(kind: str, claim: dict, groups: list[list[str]], version: int, where: str) -> None:
    if kind in DERIVATIONS:
        _check_numeric_shape(kind, claim, version, where)
    else:
        _check_boolean_shape(kind, claim, groups, version, where)


def _count_text(least: int, most: int | None) -> str:
    return f"{least}" if least == most else f"at least {least}" if most is None else f"{least} to {most}"


def _check_count(kind: str, n: int, version: int, where: str) -> None:
    _, least, most, introduced, _ = DERIVATIONS[kind]
    if introduced > version:
        raise RecipeError(f"{where}: {kind} needs format_version {introduced}.")
    if version == 1 and kind in _VERSION_1_ARITY:
        most = _VERSION_1_ARITY[kind]
        if n > most:
            raise RecipeError(f"{where}: {kind} takes {most} figures in format_version 1, got {n}; "
                              "n-ary needs format_version 2.")
    if n < least or (most is not None and n > most):
        raise RecipeError(f"{where}: {kind} takes {_count_text(least, most)} figures, got {n}.")


def _check_numeric_shape(kind: str, claim: dict, version: int, where: str) -> None:
    n = len(claim["from"])
    _check_count(kind, n, version, where)
    if kind == "percentile":
        _check_percentile(claim, n, where)
    elif "q" in claim or "rule" in claim:
        raise RecipeError(f"{where}: q and rule belong to percentile, not {kind}.")
    if kind == "rank" and claim.get("order", "ascending") not in ("ascending", "descending"):
        raise RecipeError(f"{where}: rank order is ascending or descending, got {str(claim.get('order'))[:40]!r}.")


def _check_sides(kind: str, claim: dict, groups: list[list[str]], where: str) -> None:
    """The two sides of a true/false comparison, as its kind needs them."""
    if kind in ("at_least", "at_most") and all(isinstance(g, list) and len(g) > 1 for g in claim["from"]):
        raise RecipeError(f"{where}: {kind} between two groups is ambiguous (pairwise or every pair?); "
                          "make one side a single figure, or use all_below.")
    if kind in ("all", "any") and (claim.get("op") not in _OPS or len(groups[1]) != 1):
        raise RecipeError(f"{where}: {kind} needs op: one of {' '.join(_OPS)} and `from: [[members...], bound]`.")
    if kind == "within":
        _check_within(claim, groups, where)


def _check_boolean_shape(kind: str, claim: dict, groups: list[list[str]], version: int, where: str) -> None:
    if _BOOLEAN_VERSION.get(kind, 1) > version:
        raise RecipeError(f"{where}: {kind} needs format_version {_BOOLEAN_VERSION[kind]}.")
    if kind == "and":
        return
    if len(groups) != 2:
        raise RecipeError(f"{where}: {kind} compares two sides, got {len(groups)}; write [a, b] or [[a, c], b].")
    _check_sides(kind, claim, groups, where)


def _check_within(claim: dict, groups: list[list[str]], where: str) -> None:
    if len(groups[0]) != 1 or len(groups[1]) != 1:
        raise RecipeError(f"{where}: within compares two figures: `from: [a, b]`.")
    if _decimal(claim.get("tolerance"), "tolerance", where) < 0:
        raise RecipeError(f"{where}: within needs a tolerance >= 0, got {claim.get('tolerance')!r}.")


def _check_percentile(claim: dict, n: int, where: str) -> None:
    rule, q = claim.get("rule"), claim.get("q")
    if rule not in PERCENTILE_RULES:
        raise RecipeError(f"{where}: percentile needs rule: {' or '.join(PERCENTILE_RULES)}, got {str(rule)[:40]!r}.")
    try:
        q_value = Decimal(str(q)) if len(str(q)) <= MAX_DIGITS else Decimal("NaN")
    except InvalidOperation:
        q_value = Decimal("NaN")
    if isinstance(q, bool) or not q_value.is_finite() or not 0 < q_value <= 100:
        raise RecipeError(f"{where}: percentile needs q in (0, 100], got {str(q)[:40]!r}.")
    index = percentile_index(n, q_value, rule)
    if not (0 <= index < n or (index == -1 and n == 1)):
        raise RecipeError(f"{where}: the {rule} rank of q={q} over {n} values is index {index}, outside the list.")


_RANK_WORDS = {1: ("fastest", "first", "highest", "largest", "lowest", "smallest", "slowest", "best", "most", "least",
                   "top"), 2: ("second",), 3: ("third",)}
_NUMBER_IN_TEXT = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _printed_key(claim: dict, stated: Figure, seen: dict[str, str], where: str) -> str:
    """The claim's printed text, stripped; refused when missing or already stated by another claim."""
    printed = claim.get("printed")
    if not isinstance(printed, str) or not printed.strip():
        raise RecipeError(f"{where}: {stated.name} needs `printed`: the text of the report it checks, e.g. \"−3.81%\".")
    key = printed.strip()
    if key in seen:
        raise RecipeError(f"{where}: {stated.name} states the printed text {key!r} that {seen[key]} already states; "
                          "one printed figure is one claim.")
    seen[key] = stated.name
    return key


def _rank_word(claim: dict, value: Decimal, key: str) -> bool:
    """A rank may be printed as a word: "fastest", "second", ..."""
    return claim.get("derive") == "rank" and any(w in key.lower() for w in _RANK_WORDS.get(int(value), ()))


def _shows(key: str, value: Decimal) -> bool:
    """Whether the text shows `value` with its sign and decimals (minus sign, commas and thin spaces allowed)."""
    normal = key.replace("\u2212", "-").replace(",", "").replace("\u2009", "").replace("\u202f", "")
    shown = [Decimal(m) for m in _NUMBER_IN_TEXT.findall(normal)]
    return any(v == value and v.as_tuple() == value.as_tuple() for v in shown)


def _check_printed(claim: dict, stated: Figure, seen: dict[str, str], where: str) -> None:
    """Format 3: the claim's printed text shows its stated value, and no other claim states that text."""
    key = _printed_key(claim, stated, seen, where)
    if isinstance(stated.value, bool) or _rank_word(claim, stated.value, key):
        return
    if not _shows(key, stated.value):
        raise RecipeError(f"{where}: {stated.name} states {stated.value} but its printed text {key!r} does not show "
                          "that value with that sign and those decimals.")


def _same_unit(units: list[str], kind: str, where: str) -> str:
    if len(set(units)) > 1:
        raise RecipeError(f"{where}: {kind} mixes units {sorted(set(units))}; its inputs must share one unit.")
    return units[0] if units else ""


_PERCENT_KINDS = ("percent_lower", "percent_change", "percent_gap_closed", "relative_range")


def _expected_units(kind: str, unit: str) -> set[str]:
    """The units a derivation of figures in `unit` may be stated in."""
    if kind in _PERCENT_KINDS:
        return _PERCENT_UNITS
    if kind == "ratio":
        return _RATIO_UNITS
    if kind == "rank":
        return {"", "rank"}
    return {unit}


def _check_units(kind: str, stated: Figure, inputs: list[Figure], claim: dict, where: str) -> None:
    """Format 3: units are declared on every figure and numeric claim, and the derivation's unit must match."""
    if "unit" not in claim and kind in DERIVATIONS:
        raise RecipeError(f"{where}: {stated.name} declares no unit (format 3 needs `unit`; \"\" is dimensionless).")
    if kind in ("and", "product"):
        return  # true/false, or a unit the file declares (products multiply units)
    unit = _same_unit([f.unit for f in inputs], kind, where)
    if kind in BOOLEAN_DERIVATIONS:
        return
    expected = _expected_units(kind, unit)
    if stated.unit not in expected:
        raise RecipeError(f"{where}: {stated.name} is in {stated.unit!r}, but {kind} of figures in {unit!r} is in "
                          f"{' or '.join(repr(u) for u in sorted(expected))}.")


def _claim_kind(claim: Any, where: str) -> tuple[str, str]:
    if not isinstance(claim, dict) or "name" not in claim or "derive" not in claim:
        raise RecipeError(f"{where}: each claim needs name, value, derive and from.")
    name, kind = claim["name"], claim["derive"]
    if not isinstance(name, str) or not name or not isinstance(kind, str):
        raise RecipeError(f"{where}: name and derive are text, got {type(name).__name__} and {type(kind).__name__}.")
    if kind not in DERIVATIONS and kind not in BOOLEAN_DERIVATIONS:
        raise RecipeError(f"{where}: unknown derivation {kind[:40]!r}; known: "
                          f"{', '.join(sorted([*DERIVATIONS, *BOOLEAN_DERIVATIONS]))}.")
    return name, kind


def _check_input_kinds(kind: str, stated: Figure, inputs: list[Figure], where: str) -> None:
    if (kind in BOOLEAN_DERIVATIONS) != isinstance(stated.value, bool):
        expected = "true or false" if kind in BOOLEAN_DERIVATIONS else "a number"
        raise RecipeError(f"{where}: {kind} states {expected}.")
    booleans = [isinstance(f.value, bool) for f in inputs]
    if kind == "and" and not all(booleans):
        raise RecipeError(f"{where}: and combines true/false figures or claims only.")
    if kind != "and" and any(booleans):
        raise RecipeError(f"{where}: {kind} derives from a true/false figure.")


def _claim_figure(claim: Any, i: int, figures: dict[str, Figure], version: int, source: str) -> tuple[str, Figure]:
    where = f"{source}: claims[{i}]"
    name, kind = _claim_kind(claim, where)
    groups = _groups(claim.get("from"), where, kind, version)
    flat = [n for g in groups for n in g]
    missing = [n for n in flat if n not in figures]
    if missing:
        raise RecipeError(f"{where}: {name} derives from unknown figures {missing[:10]}; "
                          "declare them under figures or as an earlier claim.")
    _check_arity(kind, claim, groups, version, where)
    if name in figures:
        raise RecipeError(f"{where}: {name!r} is declared twice.")
    stated = _figure(name, claim, where, version)
    inputs = [figures[n] for n in flat]
    _check_input_kinds(kind, stated, inputs, where)
    if version >= 3:
        _check_units(kind, stated, inputs, claim, where)
    return where, stated


def _version(data: Any, source: str) -> int:
    version = data.get("format_version") if isinstance(data, dict) else None
    if version not in CLAIMS_FORMAT_VERSIONS or isinstance(version, bool):
        raise RecipeError(f"{source}: not a claims file with format_version "
                          f"{', '.join(map(str, CLAIMS_FORMAT_VERSIONS[:-1]))} or {CLAIMS_FORMAT_VERSIONS[-1]}.")
    return int(version)


def _check_section_types(raw_figures: Any, raw_claims: Any, source: str) -> None:
    if not isinstance(raw_figures, dict):
        raise RecipeError(f"{source}: figures is a mapping of name to value.")
    if not isinstance(raw_claims, list):
        raise RecipeError(f"{source}: claims is a list.")
    if len(raw_figures) + len(raw_claims) > MAX_ITEMS:
        raise RecipeError(f"{source}: more than {MAX_ITEMS} figures and claims.")


def _check_format_3_units(raw_figures: dict, source: str) -> None:
    """Format 3: a unit on every figure."""
    undeclared = [n for n, spec in raw_figures.items() if not isinstance(spec, dict) or "unit" not in spec]
    if undeclared:
        raise RecipeError(f"{source}: figures {undeclared[:5]} declare no unit (format 3 needs `unit`).")


def _sections(data: Any, source: str) -> tuple[int, dict, list]:
    """format_version, figures and claims of a claims file, each of the right type and size."""
    version = _version(data, source)
    raw_figures, raw_claims = data.get("figures") or {}, data.get("claims") or []
    if version >= 3 and set(map(str, data)) - _TOP_KEYS:
        raise RecipeError(f"{source}: unknown keys {sorted(set(map(str, data)) - _TOP_KEYS)}.")
    _check_section_types(raw_figures, raw_claims, source)
    if version >= 3:
        _check_format_3_units(raw_figures, source)
    return version, raw_figures, raw_claims


def parse_claims(data: Any, source: str = "<claims>") -> dict[str, Any]:
    version, raw_figures, raw_claims = _sections(data, source)
    figures = {str(name): _figure(str(name), spec, source, version) for name, spec in raw_figures.items()}
    claims: list[dict] = []
    printed: dict[str, str] = {}
    for i, claim in enumerate(raw_claims):
        where, stated = _claim_figure(claim, i, figures, version, source)
        if version >= 3:
            _check_printed(claim, stated, printed, where)
        figures[stated.name] = stated
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


def _disjoint(groups: list[list[Any]], _: dict) -> bool:
    a, b = groups
    return max(a) < min(b) or max(b) < min(a)


def _within(groups: list[list[Any]], claim: dict) -> bool:
    return abs(groups[0][0] - groups[1][0]) <= _decimal(claim["tolerance"], "tolerance", "")


def _held(groups: list[list[Any]], claim: dict) -> list[bool]:
    test = _OPS[claim["op"]]
    return [test(x, groups[1][0]) for x in groups[0]]


def _one_against_every(kind: str) -> Callable[[list[list[Any]], dict], bool]:
    """at_least / at_most: one side is one figure; it must hold against every member of the other."""
    def holds(groups: list[list[Any]], _: dict) -> bool:
        a, b = groups
        return all(x >= y if kind == "at_least" else x <= y for x in a for y in b)
    return holds


_BOOLEANS: dict[str, Callable[[list[list[Any]], dict], bool]] = {
    "and": lambda groups, _: all(x is True for g in groups for x in g),
    "disjoint_ranges": _disjoint,
    "all_below": lambda groups, _: max(groups[0]) < min(groups[1]),
    "within": _within,
    "all": lambda groups, claim: all(_held(groups, claim)),
    "any": lambda groups, claim: any(_held(groups, claim)),
    "at_least": _one_against_every("at_least"),
    "at_most": _one_against_every("at_most"),
}


def _boolean(kind: str, groups: list[list[Any]], claim: dict) -> bool:
    return _BOOLEANS[kind](groups, claim)


_INFINITE = (Decimal("-Infinity"), Decimal("Infinity"))


def _product_bounds(lo_in: Values, hi_in: Values) -> tuple[Decimal, Decimal]:
    """Interval arithmetic: the product of independent intervals, one input at a time (linear in the inputs)."""
    lo, hi = Decimal(1), Decimal(1)
    for a, b in zip(lo_in, hi_in, strict=True):
        corners = (lo * a, lo * b, hi * a, hi * b)
        lo, hi = min(corners), max(corners)
    return lo, hi


def _rank_bounds(lo_in: Values, hi_in: Values, claim: dict) -> tuple[Decimal, Decimal]:
    (tlo, thi), others = (lo_in[0], hi_in[0]), list(zip(lo_in[1:], hi_in[1:], strict=True))
    if claim.get("order", "ascending") == "descending":
        return Decimal(1 + sum(1 for lo, _ in others if lo > thi)), Decimal(1 + sum(1 for _, hi in others if hi > tlo))
    return Decimal(1 + sum(1 for _, hi in others if hi < tlo)), Decimal(1 + sum(1 for lo, _ in others if lo < thi))


def _spread_bounds(lo_in: Values, hi_in: Values) -> tuple[Decimal, Decimal]:
    return max(Decimal(0), max(lo_in) - min(hi_in)), max(hi_in) - min(lo_in)


def _relative_range_bounds(lo_in: Values, hi_in: Values, claim: dict) -> tuple[Decimal, Decimal]:
    (spread_lo, spread_hi), mean_lo, mean_hi = _spread_bounds(lo_in, hi_in), _mean(lo_in, claim), _mean(hi_in, claim)
    if mean_lo <= 0:
        return _INFINITE
    return spread_lo / mean_hi * 100, spread_hi / mean_lo * 100


_DIVISORS = {"ratio": [1], "percent_lower": [0], "percent_change": [0]}


def _divisor_spans_zero(kind: str, lo_in: Values, hi_in: Values) -> bool:
    """Whether a divisor's interval holds zero (then every value is reachable)."""
    if kind == "percent_gap_closed":
        return lo_in[0] - hi_in[2] <= 0 <= hi_in[0] - lo_in[2]
    return any(lo_in[i] <= 0 <= hi_in[i] for i in _DIVISORS.get(kind, []))


def _corner_bounds(kind: str, function: Callable[[Values, dict], Decimal], lo_in: Values, hi_in: Values,
                   claim: dict) -> tuple[Decimal, Decimal]:
    """The extremes over every corner of the input box (monotone in each input between the corners)."""
    if kind == "difference" and len(lo_in) > _CORNER_LIMIT:
        return function(lo_in[:1] + hi_in[1:], claim), function(hi_in[:1] + lo_in[1:], claim)
    if _divisor_spans_zero(kind, lo_in, hi_in):
        return _INFINITE
    corners = [function([hi if s > 0 else lo for lo, hi, s in zip(lo_in, hi_in, signs, strict=True)], claim)
               for signs in itertools.product((-1, 1), repeat=len(lo_in))]
    return min(corners), max(corners)


def _bounds(kind: str, function: Callable[[Values, dict], Decimal], lo_in: Values, hi_in: Values,
            claim: dict) -> tuple[Decimal, Decimal]:
    """The least and greatest value the derivation takes when each input lies in its interval."""
    if kind in ("spread", "range"):
        return _spread_bounds(lo_in, hi_in)
    if kind in _INCREASING or (kind == "product" and min(lo_in) >= 0):
        return function(lo_in, claim), function(hi_in, claim)
    special = {"product": lambda: _product_bounds(lo_in, hi_in), "rank": lambda: _rank_bounds(lo_in, hi_in, claim),
               "relative_range": lambda: _relative_range_bounds(lo_in, hi_in, claim)}
    if kind in special:
        return special[kind]()
    return _corner_bounds(kind, function, lo_in, hi_in, claim)


def _side(values: Values) -> Decimal:
    return values[0] if len(values) == 1 else sum(values, Decimal(0)) / len(values)


def _exact(kind: str, function: Callable[[Values, dict], Decimal], values: Values, claim: dict, where: str) -> Decimal:
    try:
        return function(values, claim)
    except (ZeroDivisionError, ArithmeticError):
        raise RecipeError(f"{where}: {kind} of {values[:4]} divides by zero; the claim has no value.") from None


def _common(claim: dict) -> dict[str, Any]:
    return {"name": claim["name"], "derive": claim["derive"], "expected_mismatch": claim.get("expect") == "mismatch",
            "finding": str(claim.get("finding", "")), "where": str(claim.get("where", ""))}


def _check_boolean(claim: dict, figures: dict[str, Figure]) -> ClaimResult:
    stated = figures[claim["name"]]
    groups = [[figures[n].value for n in (g if isinstance(g, list) else [g])] for g in claim["from"]]
    got = _boolean(claim["derive"], groups, claim)
    ok = got == stated.value
    return ClaimResult(stated=str(stated.value).lower(), recomputed=str(got).lower(),
                       status="exact" if ok else "mismatch", within_rounding=ok, **_common(claim))


def _selecting_detail(kind: str, stated: Figure, inputs: list[Figure]) -> str:
    """Why a claim that selects or restates an input prints more decimals than its inputs support ("" if it does not)."""
    supported = max(f.decimals for f in inputs) + (1 if kind == "median" and len(inputs) % 2 == 0 else 0)
    if kind in _SELECTING and stated.decimals > supported:
        return (f"states {stated.decimals} decimals; {kind} of inputs printed with at most "
                f"{max(f.decimals for f in inputs)} supports {supported}")
    return ""


def _status(recomputed: Decimal, stated: Decimal, version: int) -> str:
    if recomputed != stated:
        return "mismatch"
    if version >= 3 and recomputed.is_zero() and recomputed.is_signed() != stated.is_signed():
        return "mismatch"  # -0.00 says the value was negative; 0.00 that it was not
    return "exact"


def _sides(claim: dict) -> list[list[str]]:
    return [g if isinstance(g, list) else [g] for g in claim["from"]]  # a group (format 3) is its mean


def _side_values(claim: dict, figures: dict[str, Figure]) -> Values:
    """Each side's value: a figure, or (format 3) the mean of a group."""
    return [_side([figures[n].value for n in side]) for side in _sides(claim)]  # type: ignore[misc]


def _interval_bounds(kind: str, function: Callable[[Values, dict], Decimal], claim: dict,
                     intervals: dict[str, tuple[Decimal, Decimal]]) -> tuple[Decimal, Decimal]:
    sides = _sides(claim)
    return _bounds(kind, function, [_side([intervals[n][0] for n in side]) for side in sides],
                   [_side([intervals[n][1] for n in side]) for side in sides], claim)


def _check(claim: dict, figures: dict[str, Figure], intervals: dict[str, tuple[Decimal, Decimal]],
           version: int = 2) -> ClaimResult:
    kind, stated = claim["derive"], figures[claim["name"]]
    if kind in BOOLEAN_DERIVATIONS:
        return _check_boolean(claim, figures)
    function = DERIVATIONS[kind][0]
    exact = _exact(kind, function, _side_values(claim, figures), claim, f"claim {claim['name']}")
    lo, hi = _interval_bounds(kind, function, claim, intervals)
    assert isinstance(stated.value, Decimal)
    recomputed = _round(exact, stated.decimals)
    detail = _selecting_detail(kind, stated, [figures[n] for side in _sides(claim) for n in side])
    status = "mismatch" if detail else _status(recomputed, stated.value, version)
    reached = None if detail else _reached(stated, lo, hi)
    if version >= 3 and reached:  # carried into the claims that use this one
        intervals[claim["name"]] = reached
    return ClaimResult(stated=str(stated.value), recomputed=str(recomputed), status=status,
                       within_rounding=reached is not None, detail=detail, **_common(claim))


def _reached(stated: Figure, lo: Decimal, hi: Decimal) -> tuple[Decimal, Decimal] | None:
    """The part of the stated figure's rounding interval that [lo, hi] reaches; None if it reaches none."""
    assert isinstance(stated.value, Decimal)
    s_lo, s_hi = stated.value - _half(stated), stated.value + _half(stated)
    if hi < s_lo or lo > s_hi:
        return None
    return max(lo, s_lo), min(hi, s_hi)


def check_claims(parsed: dict[str, Any]) -> list[ClaimResult]:
    figures: dict[str, Figure] = parsed["figures"]
    version = int(parsed.get("format_version", 2))
    intervals = {n: (f.value - _half(f), f.value + _half(f)) for n, f in figures.items()
                 if not isinstance(f.value, bool)}
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        ctx.Emax, ctx.Emin = 10**6, -(10**6)
        return [_check(claim, figures, intervals, version) for claim in parsed["claims"]]



def _mark(r: ClaimResult) -> str:
    if r.status == "exact":
        return "STALE" if r.expected_mismatch else "OK"
    return "FINDING" if r.expected_mismatch else "FAIL"


def _note(r: ClaimResult) -> str:
    if r.detail:
        return f" ({r.detail})"
    if r.status == "exact":
        return ""
    return " (reachable within the inputs' rounding)" if r.within_rounding else " (not reachable even within rounding)"


def _result_line(r: ClaimResult, width: int, derive_width: int) -> str:
    line = (f"{_mark(r):<7} {r.name.ljust(width)}  {r.derive.ljust(derive_width)} stated {r.stated:>10}  "
            f"recomputed {r.recomputed:>10}{_note(r)}")
    return line + (f"\n        finding: {r.finding}" if r.finding else "")


def format_results(results: list[ClaimResult]) -> str:
    width = max((len(r.name) for r in results), default=0)
    derive_width = max((len(r.derive) for r in results), default=0) + 1
    lines = [_result_line(r, width, derive_width) for r in results]
    failed = sum(r.failed for r in results)
    findings = sum(1 for r in results if r.status == "mismatch" and r.expected_mismatch)
    lines.append(f"{len(results)} claims: {failed} failed, {findings} declared findings.")
    return "\n".join(lines)

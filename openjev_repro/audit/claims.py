"""Claims files: the figures a published report states, and how the derived ones follow.

A claims file (YAML, format_version 1, 2 or 3) has base `figures` (as printed) and `claims`,
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
       names the `printed` text it checks, which must show the stated value (a rank printed
       in words must mean that rank: "second fastest" is rank 2), and no two claims state the
       same printed text; a signed zero (-0.00) keeps its sign; rounding reachability carries
       through chains (a claim used as an input lies in its own reachable interval, not only
       in its printed one).

Every version: values are bounded (at most 24 significant digits, 20 decimals, magnitude
below 10**24; at most 10,000 figures per claim and claims per file), every operator checks
its domain (a division by zero is one error naming the claim), and evaluation is bounded:
rounding bounds of many inputs come from interval arithmetic, not from every corner.

The file decodes once into a `ClaimsFile`: `PrintedFigure`s and one `Claim` per claim, each an
instance of its kind (`MeanOf`, `Ratio`, ..., `Within`, `And`). A kind knows its own shape
(`check_shape`), its value (`value`, or `holds` for a true/false kind), the bounds its value
takes over the inputs' rounding intervals (`bounds`) and its unit; `Claim.check` gives the
`ClaimResult`.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..errors import RecipeError
from ..evidence.recipe import read_yaml

__all__ = [
    "BOOLEAN_DERIVATIONS",
    "CLAIMS_FORMAT_VERSION",
    "CLAIMS_FORMAT_VERSIONS",
    "DERIVATIONS",
    "FORMAT_3_OPERATORS",
    "KINDS",
    "Claim",
    "ClaimResult",
    "ClaimsFile",
    "PrintedFigure",
    "check_claims",
    "format_results",
    "load_claims",
    "parse_claims",
    "printable",
    "summary_line",
]

CLAIMS_FORMAT_VERSION = 3  # written by this version; every version in CLAIMS_FORMAT_VERSIONS is read
CLAIMS_FORMAT_VERSIONS = (1, 2, 3)
MAX_DIGITS = 24  # significant digits of one value
MAX_DECIMALS = 20
MAX_EXPONENT = 24  # |value| < 10**24
MAX_ITEMS = 10_000  # figures per claim; claims and figures per file
_PRECISION = 80  # decimal digits of every intermediate (the limits above keep every result exact well within it)
_CORNER_LIMIT = 10  # up to this many inputs, rounding bounds come from every corner of the input box
PERCENTILE_RULES = ("nearest_rank", "jevbench")
_PERCENT_UNITS = frozenset({"%", "percent"})
_RATIO_UNITS = frozenset({"x", "×", "", "1"})

Values = list[Decimal]
Interval = tuple[Decimal, Decimal]
_INFINITE: Interval = (Decimal("-Infinity"), Decimal("Infinity"))
Printed = str | int | float | bool  # a value as YAML gives it
Name = Annotated[str, Meta(min_length=1, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]  # one printable line


# --- the file as written -------------------------------------------------------------------------

class FigureSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A figure as written (format 1-2: other keys are ignored)."""

    value: Printed | None = None
    unit: str | UnsetType = UNSET
    where: str = ""
    decimals: int | float | UnsetType = UNSET  # checked where it is read (a quoted value carries its own)
    printed: str | UnsetType = UNSET


class ClaimSpec(FigureSpec, frozen=True, kw_only=True, rename={"inputs": "from"}):
    """A claim as written: a stated figure, its derivation and that derivation's parameters."""

    name: Name
    derive: str
    inputs: list[str | list[str]] | UnsetType = UNSET
    expect: str = ""
    finding: str = ""
    q: int | float | str | UnsetType = UNSET
    rule: str | UnsetType = UNSET
    tolerance: int | float | str | UnsetType = UNSET
    op: str | UnsetType = UNSET
    order: str = "ascending"


class StrictFigureSpec(FigureSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Format 3: a figure holds only the keys a figure knows."""


class StrictClaimSpec(ClaimSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Format 3: a claim holds only the keys a claim knows."""


class FileSpec(msgspec.Struct, frozen=True, kw_only=True):
    format_version: int
    report: str | None = None
    experiment: str | None = None
    figures: dict[Name, FigureSpec | Printed] | None = None
    claims: list[ClaimSpec] | None = None


class StrictFileSpec(FileSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    figures: dict[Name, StrictFigureSpec | Printed] | None = None  # type: ignore[assignment]
    claims: list[StrictClaimSpec] | None = None  # type: ignore[assignment]
    source: str | None = None
    notes: str | list[str] | None = None


# --- numbers as printed ---------------------------------------------------------------------------

def _number_text(raw: object) -> str:
    """The value as printed: a string (commas, a leading + and the minus sign U+2212 allowed) or a YAML number."""
    if isinstance(raw, str):
        return raw.strip().replace(",", "").replace("\u2212", "-").lstrip("+")
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return str(raw)
    return repr(raw)


def _decimal(raw: object, what: str, where: str) -> Decimal:
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


def _round(value: Decimal, decimals: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def _mean(xs: Values) -> Decimal:
    return sum(xs, Decimal(0)) / len(xs)


def percentile_index(n: int, q: Decimal, rule: str) -> int:
    """0-based index into the sorted values: nearest rank ceil(q/100*N)-1, or JevBench's int(q/100*N)-1.

    Both use the binary float q/100*N exactly as the upstream expressions do (see
    ../shared/facts/upstream.md); JevBench's rank of a single value is index -1, that value.
    """
    share = float(q) / 100 * n
    return math.ceil(share) - 1 if rule == "nearest_rank" else int(share) - 1


_NUMBER_IN_TEXT = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _shows(text: str, value: Decimal) -> bool:
    """Whether the text shows `value` with its sign and decimals (minus sign, commas and thin spaces allowed)."""
    normal = text.replace("\u2212", "-").replace(",", "").replace("\u2009", "").replace("\u202f", "")
    return any(v == value and v.as_tuple() == value.as_tuple() for v in map(Decimal, _NUMBER_IN_TEXT.findall(normal)))


@dataclass(frozen=True)
class PrintedFigure:
    """A figure as the report prints it: its value, printed decimals, unit and where it stands."""

    name: str
    value: Decimal | bool
    decimals: int  # printed decimals; 0 for integers and booleans
    unit: str = ""
    where: str = ""

    @classmethod
    def of(cls, name: str, spec: FigureSpec, where: str) -> PrintedFigure:
        unit = "" if spec.unit is UNSET else spec.unit
        if isinstance(spec.value, bool):
            return cls(name, spec.value, 0, unit, spec.where)
        value = _decimal(spec.value, f"figure {name!r}", where)
        exponent = value.as_tuple().exponent
        assert isinstance(exponent, int)
        decimals = max(-exponent, 0)
        if not isinstance(spec.value, str) and spec.decimals is not UNSET:  # a YAML number says how it was printed
            if not isinstance(spec.decimals, int) or not 0 <= spec.decimals <= MAX_DECIMALS:
                raise RecipeError(f"{where}: {name!r} decimals {str(spec.decimals)[:40]!r} is not an integer in "
                                  f"[0, {MAX_DECIMALS}].")
            decimals = spec.decimals or decimals
        return cls(name, value, decimals, unit, spec.where)

    @property
    def number(self) -> Decimal:
        assert isinstance(self.value, Decimal)
        return self.value

    def reached(self, lo: Decimal, hi: Decimal) -> Interval | None:
        """The part of this figure's rounding interval that [lo, hi] reaches; None if it reaches none."""
        s_lo, s_hi = self.interval
        return None if hi < s_lo or lo > s_hi else (max(lo, s_lo), min(hi, s_hi))

    @property
    def interval(self) -> Interval:
        """Where the unrounded value lay: the printed value plus or minus half its last decimal."""
        half = Decimal(5).scaleb(-self.decimals - 1)
        return self.number - half, self.number + half


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

    @property
    def mark(self) -> str:
        """OK, FAIL, FINDING (a declared mismatch) or STALE (a declared mismatch that now reproduces)."""
        if self.status == "exact":
            return "STALE" if self.expected_mismatch else "OK"
        return "FINDING" if self.expected_mismatch else "FAIL"

    @property
    def reading(self) -> str:
        """Its derivation, then why it does not reproduce and the finding declared: one text that wraps."""
        found = [f"finding: {printable(self.finding)}"] if self.finding else []
        return "; ".join(part for part in (self.derive, self.note, *found) if part)

    @property
    def note(self) -> str:
        """Why it does not reproduce: beyond its value, or whether rounding could reach it ("" when exact)."""
        if self.detail:
            return self.detail
        if self.status == "exact":
            return ""
        return "reachable within the inputs' rounding" if self.within_rounding else "not reachable even within rounding"


# --- claims: one class per kind ---------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    """A stated figure and its derivation from earlier figures; each kind is a subclass."""

    kind: ClassVar[str]
    description: ClassVar[str]
    introduced: ClassVar[int] = 1  # the format_version that introduced the kind
    boolean: ClassVar[bool] = False  # states true or false
    of_booleans: ClassVar[bool] = False  # derives from true/false figures

    spec: ClaimSpec
    stated: PrintedFigure
    sides: tuple[tuple[str, ...], ...]  # `from`: each side a figure, or a group of them
    at: str  # where in the file, for errors: "FILE: claims[3]"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def names(self) -> list[str]:
        """The input figures, every member of every side."""
        return [n for side in self.sides for n in side]

    @classmethod
    def may_group(cls, version: int) -> bool:
        """Whether `from` may hold groups (the true/false comparisons do)."""
        return True

    def check_shape(self, version: int) -> None:
        """The claim's `from` and parameters, as its kind and the file's format version allow."""
        if self.introduced > version:
            raise RecipeError(f"{self.at}: {self.kind} needs format_version {self.introduced}.")

    def check_inputs(self, inputs: list[PrintedFigure]) -> None:
        """The stated value and the inputs are of the kinds this claim derives (numbers, or true/false)."""
        if self.boolean != isinstance(self.stated.value, bool):
            raise RecipeError(f"{self.at}: {self.kind} states {'true or false' if self.boolean else 'a number'}.")
        booleans = [isinstance(f.value, bool) for f in inputs]
        if self.of_booleans and not all(booleans):
            raise RecipeError(f"{self.at}: {self.kind} combines true/false figures or claims only.")
        if not self.of_booleans and any(booleans):
            raise RecipeError(f"{self.at}: {self.kind} derives from a true/false figure.")

    def check_units(self, inputs: list[PrintedFigure]) -> None:
        """Format 3: the inputs share one unit, and the stated one is what the kind gives of it."""
        units = sorted({f.unit for f in inputs})
        if len(units) > 1:
            raise RecipeError(f"{self.at}: {self.kind} mixes units {units}; its inputs must share one unit.")

    def check_printed(self, text: str) -> None:
        """Refuse printed text whose words contradict the stated value (a kind that reads words says how)."""

    def shows(self, text: str) -> bool:
        """Whether the report's printed text shows the stated value."""
        return _shows(text, self.stated.number)

    def check(self, figures: dict[str, PrintedFigure], intervals: dict[str, Interval], version: int) -> ClaimResult:
        raise NotImplementedError

    def _result(self, stated: str, recomputed: str, status: str, within_rounding: bool, detail: str = "") -> ClaimResult:
        return ClaimResult(name=self.name, derive=self.kind, stated=stated, recomputed=recomputed, status=status,
                           within_rounding=within_rounding, expected_mismatch=self.spec.expect == "mismatch",
                           finding=self.spec.finding, where=self.spec.where, detail=detail)


def _count_text(least: int, most: int | None) -> str:
    return f"{least}" if least == most else f"at least {least}" if most is None else f"{least} to {most}"


class NumericClaim(Claim):
    """A claim whose value is a number derived from its inputs."""

    least: ClassVar[int] = 1
    most: ClassVar[int | None] = None
    most_in_version_1: ClassVar[int | None] = None  # n-ary kinds took exactly two figures in format 1
    grouped: ClassVar[bool] = False  # format 3: a side may be a group, taken as its mean
    selecting: ClassVar[bool] = False  # selects or restates an input: no more decimals than its inputs
    divisors: ClassVar[tuple[int, ...]] = ()  # the inputs it divides by

    @classmethod
    def may_group(cls, version: int) -> bool:
        return version >= 3 and cls.grouped

    def check_shape(self, version: int) -> None:
        super().check_shape(version)
        n = len(self.sides)
        most = self.most
        if version == 1 and self.most_in_version_1 is not None:
            most = self.most_in_version_1
            if n > most:
                raise RecipeError(f"{self.at}: {self.kind} takes {most} figures in format_version 1, got {n}; "
                                  "n-ary needs format_version 2.")
        if n < self.least or (most is not None and n > most):
            raise RecipeError(f"{self.at}: {self.kind} takes {_count_text(self.least, most)} figures, got {n}.")
        self.check_parameters()

    def check_parameters(self) -> None:
        """The kind's own parameters (q and rule are percentile's)."""
        if self.spec.q is not UNSET or self.spec.rule is not UNSET:
            raise RecipeError(f"{self.at}: q and rule belong to percentile, not {self.kind}.")

    def check_units(self, inputs: list[PrintedFigure]) -> None:
        if self.spec.unit is UNSET:
            raise RecipeError(f"{self.at}: {self.name} declares no unit (format 3 needs `unit`; \"\" is dimensionless).")
        super().check_units(inputs)
        unit = inputs[0].unit if inputs else ""
        expected = self.units_of(unit)
        if self.stated.unit not in expected:
            raise RecipeError(f"{self.at}: {self.name} is in {self.stated.unit!r}, but {self.kind} of figures in "
                              f"{unit!r} is in {' or '.join(repr(u) for u in sorted(expected))}.")

    def units_of(self, unit: str) -> frozenset[str]:
        """The units the derivation of figures in `unit` may be stated in."""
        return frozenset({unit})

    def value(self, xs: Values) -> Decimal:
        raise NotImplementedError

    def bounds(self, lo: Values, hi: Values) -> Interval:
        """The least and greatest value when each input lies in [lo, hi] (from every corner of that box)."""
        if any(lo[i] <= 0 <= hi[i] for i in self.divisors):
            return _INFINITE  # a divisor's interval holds zero: every value is reachable
        corners = [self.value([b if s > 0 else a for a, b, s in zip(lo, hi, signs, strict=True)])
                   for signs in itertools.product((-1, 1), repeat=len(lo))]
        return min(corners), max(corners)

    def _side_values(self, value_of: Callable[[str], Decimal]) -> Values:
        """Each side's value: a figure's, or (format 3) the mean of a group's."""
        return [value_of(side[0]) if len(side) == 1 else _mean([value_of(n) for n in side]) for side in self.sides]

    def _exact(self, figures: dict[str, PrintedFigure]) -> Decimal:
        values = self._side_values(lambda n: figures[n].number)
        try:
            return self.value(values)
        except ArithmeticError:
            raise RecipeError(f"claim {self.name}: {self.kind} of {values[:4]} divides by zero; "
                              "the claim has no value.") from None

    def extra_decimals(self, n: int) -> int:
        """Decimals the value may print beyond its inputs' (a selecting kind's value is one of them)."""
        return 0

    def _unsupported_decimals(self, inputs: list[PrintedFigure]) -> str:
        """Why a selecting claim prints more decimals than its inputs support ("" if it does not)."""
        printed = max(f.decimals for f in inputs)
        supported = printed + self.extra_decimals(len(inputs))
        if self.selecting and self.stated.decimals > supported:
            return (f"states {self.stated.decimals} decimals; {self.kind} of inputs printed with at most "
                    f"{printed} supports {supported}")
        return ""

    def check(self, figures: dict[str, PrintedFigure], intervals: dict[str, Interval], version: int) -> ClaimResult:
        exact = self._exact(figures)
        lo, hi = self.bounds(self._side_values(lambda n: intervals[n][0]), self._side_values(lambda n: intervals[n][1]))
        stated = self.stated.number
        recomputed = _round(exact, self.stated.decimals)
        detail = self._unsupported_decimals([figures[n] for n in self.names])
        if detail:
            return self._result(str(stated), str(recomputed), "mismatch", False, detail)
        signed_zero = version >= 3 and recomputed.is_zero() and recomputed.is_signed() != stated.is_signed()
        status = "exact" if recomputed == stated and not signed_zero else "mismatch"  # -0.00: it was negative
        reached = self.stated.reached(lo, hi)
        if version >= 3 and reached:  # carried into the claims that use this one
            intervals[self.name] = reached
        return self._result(str(stated), str(recomputed), status, reached is not None)


class Increasing(NumericClaim):
    """A derivation that grows with every input: its bounds are its value at the low and the high ends."""

    def bounds(self, lo: Values, hi: Values) -> Interval:
        return self.value(lo), self.value(hi)


class MeanOf(Increasing):
    kind, description = "mean_of", "arithmetic mean (overall mean of equal-sized passes)"

    def value(self, xs: Values) -> Decimal:
        return _mean(xs)


class Sum(Increasing):
    kind, description = "sum", "a + b + ..."

    def value(self, xs: Values) -> Decimal:
        return sum(xs, Decimal(0))


class Rounded(Increasing):
    kind, description, most, selecting = "rounded", "the same figure printed with fewer decimals", 1, True

    def value(self, xs: Values) -> Decimal:
        return xs[0]


class Max(Increasing):
    kind, description, introduced, selecting = "max", "the largest listed value", 2, True

    def value(self, xs: Values) -> Decimal:
        return max(xs)


class Min(Increasing):
    kind, description, introduced, selecting = "min", "the smallest listed value", 2, True

    def value(self, xs: Values) -> Decimal:
        return min(xs)


class Median(Increasing):
    kind, introduced, selecting = "median", 2, True
    description = "the middle value (mean of the two middle values for an even count)"

    def value(self, xs: Values) -> Decimal:
        s, n = sorted(xs), len(xs)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    def extra_decimals(self, n: int) -> int:
        return 1 if n % 2 == 0 else 0  # the mean of the two middle values


class Percentile(Increasing):
    kind, introduced, selecting = "percentile", 2, True
    description = "sorted[rank] with `q` and `rule`: nearest_rank or jevbench"

    @property
    def q(self) -> Decimal:
        text = str(self.spec.q)
        try:
            return Decimal(text) if len(text) <= MAX_DIGITS else Decimal("NaN")
        except InvalidOperation:
            return Decimal("NaN")

    def check_parameters(self) -> None:
        rule, q, n = self.spec.rule, self.q, len(self.sides)
        if rule not in PERCENTILE_RULES:
            raise RecipeError(f"{self.at}: percentile needs rule: {' or '.join(PERCENTILE_RULES)}, "
                              f"got {str(None if rule is UNSET else rule)[:40]!r}.")
        if not q.is_finite() or not 0 < q <= 100:
            shown = None if self.spec.q is UNSET else self.spec.q
            raise RecipeError(f"{self.at}: percentile needs q in (0, 100], got {str(shown)[:40]!r}.")
        index = percentile_index(n, q, rule)
        if not (0 <= index < n or (index == -1 and n == 1)):
            raise RecipeError(f"{self.at}: the {rule} rank of q={self.spec.q} over {n} values is index {index}, "
                              "outside the list.")

    def value(self, xs: Values) -> Decimal:
        assert isinstance(self.spec.rule, str)
        return sorted(xs)[percentile_index(len(xs), self.q, self.spec.rule)]


class Spread(NumericClaim):
    kind, description = "spread", "max - min (pass-to-pass spread)"

    def value(self, xs: Values) -> Decimal:
        return max(xs) - min(xs)

    def bounds(self, lo: Values, hi: Values) -> Interval:
        return max(Decimal(0), max(lo) - min(hi)), max(hi) - min(lo)


class Range(Spread):
    kind, description, introduced = "range", "max - min of the listed values", 2


class Difference(NumericClaim):
    kind, description, least, most_in_version_1 = "difference", "first - second - ... (version 1: exactly two)", 2, 2

    def value(self, xs: Values) -> Decimal:
        return xs[0] - sum(xs[1:])

    def bounds(self, lo: Values, hi: Values) -> Interval:
        if len(lo) > _CORNER_LIMIT:  # decreasing in every input but the first
            return self.value(lo[:1] + hi[1:]), self.value(hi[:1] + lo[1:])
        return super().bounds(lo, hi)


class Product(NumericClaim):
    kind, description, least, most_in_version_1 = "product", "a * b * ... (version 1: exactly two)", 2, 2

    def value(self, xs: Values) -> Decimal:
        out = Decimal(1)
        for x in xs:
            out *= x
        return out

    def bounds(self, lo: Values, hi: Values) -> Interval:
        """Interval arithmetic: the product of independent intervals, one input at a time (linear in the inputs)."""
        if min(lo) >= 0:
            return self.value(lo), self.value(hi)
        low, high = Decimal(1), Decimal(1)
        for a, b in zip(lo, hi, strict=True):
            corners = (low * a, low * b, high * a, high * b)
            low, high = min(corners), max(corners)
        return low, high

    def check_units(self, inputs: list[PrintedFigure]) -> None:
        if self.spec.unit is UNSET:
            super().check_units(inputs)  # the message for a missing unit
        # a product's unit is the file's to declare (products multiply units)


class Ratio(NumericClaim):
    kind, description, least, most = "ratio", "a / b (speedup = baseline mean / candidate mean)", 2, 2
    grouped, divisors = True, (1,)

    def value(self, xs: Values) -> Decimal:
        return xs[0] / xs[1]

    def units_of(self, unit: str) -> frozenset[str]:
        return _RATIO_UNITS


class Percent(NumericClaim):
    """A derivation stated in percent."""

    def units_of(self, unit: str) -> frozenset[str]:
        return _PERCENT_UNITS


class PercentLower(Percent):
    kind, description, least, most = "percent_lower", "(baseline - candidate) / baseline * 100", 2, 2
    grouped, divisors = True, (0,)

    def value(self, xs: Values) -> Decimal:
        return (xs[0] - xs[1]) / xs[0] * 100


class PercentChange(Percent):
    kind, description, least, most = "percent_change", "(b - a) / a * 100, signed: negative when b is below a", 2, 2
    introduced, grouped, divisors = 3, True, (0,)

    def value(self, xs: Values) -> Decimal:
        return (xs[1] - xs[0]) / xs[0] * 100


class PercentGapClosed(Percent):
    kind, description, least, most = "percent_gap_closed", "(before - after) / (before - target) * 100", 3, 3

    def value(self, xs: Values) -> Decimal:
        return (xs[0] - xs[1]) / (xs[0] - xs[2]) * 100

    def bounds(self, lo: Values, hi: Values) -> Interval:
        if lo[0] - hi[2] <= 0 <= hi[0] - lo[2]:
            return _INFINITE  # the divisor (before - target) may be zero
        return super().bounds(lo, hi)


class RelativeRange(Percent):
    kind, description, least, introduced = "relative_range", "(max - min) / mean * 100 of the listed values", 2, 3

    def value(self, xs: Values) -> Decimal:
        return (max(xs) - min(xs)) / _mean(xs) * 100

    def bounds(self, lo: Values, hi: Values) -> Interval:
        spread_lo, spread_hi = max(Decimal(0), max(lo) - min(hi)), max(hi) - min(lo)
        mean_lo, mean_hi = _mean(lo), _mean(hi)
        if mean_lo <= 0:
            return _INFINITE
        return spread_lo / mean_hi * 100, spread_hi / mean_lo * 100


# A rank printed in words: an ordinal ("second", "3rd"; "first" is 1) and a superlative. A superlative
# names the first place ("fastest", "lowest" in ascending order) or the last ("slowest", "lowest" in
# descending order), counted from that end: "second slowest" of five is rank 4.
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
             "ninth": 9, "tenth": 10}
_FIRST_WORDS = {"fastest", "best", "top", "quickest"}
_LAST_WORDS = {"slowest", "worst", "last", "bottom"}
_LOW_WORDS = {"lowest", "smallest", "least", "fewest", "shortest", "cheapest"}
_HIGH_WORDS = {"highest", "largest", "most", "greatest", "longest", "biggest"}
_WORD = re.compile(r"[a-z]+|\d+(?:st|nd|rd|th)\b")


class Rank(NumericClaim):
    kind, least, introduced = "rank", 2, 3
    description = "1 + how many of the others are lower (order: descending: higher) than the first"

    @property
    def descending(self) -> bool:
        return self.spec.order == "descending"

    def check_parameters(self) -> None:
        super().check_parameters()
        if self.spec.order not in ("ascending", "descending"):
            raise RecipeError(f"{self.at}: rank order is ascending or descending, got {self.spec.order[:40]!r}.")

    def value(self, xs: Values) -> Decimal:
        target, others = xs[0], xs[1:]
        return Decimal(1 + sum(1 for x in others if (x > target if self.descending else x < target)))

    def bounds(self, lo: Values, hi: Values) -> Interval:
        (tlo, thi), others = (lo[0], hi[0]), list(zip(lo[1:], hi[1:], strict=True))
        if self.descending:
            return Decimal(1 + sum(1 for a, _ in others if a > thi)), Decimal(1 + sum(1 for _, b in others if b > tlo))
        return Decimal(1 + sum(1 for _, b in others if b < tlo)), Decimal(1 + sum(1 for a, _ in others if a < thi))

    def units_of(self, unit: str) -> frozenset[str]:
        return frozenset({"", "rank"})

    def words_rank(self, text: str) -> int | None:
        """The rank the text states in words ("fastest": 1, "second slowest" of 5: 4), None if it uses none."""
        words = _WORD.findall(text.lower())
        ordinal = next((_ORDINALS[w] if w in _ORDINALS else int(w[:-2]) for w in words
                        if w in _ORDINALS or w[:1].isdigit()), None)
        high, low = (_HIGH_WORDS, _LOW_WORDS) if self.descending else (_LOW_WORDS, _HIGH_WORDS)
        if (_LAST_WORDS | low).intersection(words):
            return len(self.sides) + 1 - (ordinal or 1)  # counted from the last place
        return ordinal or (1 if (_FIRST_WORDS | high).intersection(words) else None)

    def check_printed(self, text: str) -> None:
        in_words = self.words_rank(text)
        if in_words is not None and in_words != self.stated.number:
            raise RecipeError(f"{self.at}: {self.name} states rank {self.stated.value} but its printed text {text!r} "
                              f"says rank {in_words}.")

    def shows(self, text: str) -> bool:
        """A rank printed in words shows it when the words mean it (checked above), else as a number."""
        return self.words_rank(text) is not None or super().shows(text)


class BooleanClaim(Claim):
    """A claim that states true or false of its inputs: two sides, each a figure or a group."""

    boolean = True

    def check_shape(self, version: int) -> None:
        super().check_shape(version)
        if len(self.sides) != 2:
            raise RecipeError(f"{self.at}: {self.kind} compares two sides, got {len(self.sides)}; "
                              "write [a, b] or [[a, c], b].")

    def holds(self, groups: list[list[Decimal]]) -> bool:
        raise NotImplementedError

    def shows(self, text: str) -> bool:
        return True  # true or false is the claim's own reading of the text

    def check(self, figures: dict[str, PrintedFigure], intervals: dict[str, Interval], version: int) -> ClaimResult:
        got = self.holds([[figures[n].value for n in side] for side in self.sides])  # type: ignore[misc]
        ok = got == self.stated.value
        return self._result(str(self.stated.value).lower(), str(got).lower(), "exact" if ok else "mismatch", ok)


class DisjointRanges(BooleanClaim):
    kind, description = "disjoint_ranges", "the [min, max] ranges of the two groups do not overlap"

    def holds(self, groups: list[list[Decimal]]) -> bool:
        a, b = groups
        return max(a) < min(b) or max(b) < min(a)


class AllBelow(BooleanClaim):
    kind, description = "all_below", "every figure of the first group is below every figure of the second"

    def holds(self, groups: list[list[Decimal]]) -> bool:
        return max(groups[0]) < min(groups[1])


class AtLeast(BooleanClaim):
    kind, description = "at_least", "a >= b for every member of whichever side is a group (one side at most)"
    test: ClassVar[Callable[[Decimal, Decimal], bool]] = operator.ge

    def check_shape(self, version: int) -> None:
        super().check_shape(version)
        if all(len(side) > 1 for side in self.sides):
            raise RecipeError(f"{self.at}: {self.kind} between two groups is ambiguous (pairwise or every pair?); "
                              "make one side a single figure, or use all_below.")

    def holds(self, groups: list[list[Decimal]]) -> bool:
        a, b = groups
        return all(type(self).test(x, y) for x in a for y in b)


class AtMost(AtLeast):
    kind, description = "at_most", "a <= b for every member of whichever side is a group (one side at most)"
    test = operator.le


class Within(BooleanClaim):
    kind, description, introduced = "within", "|a - b| <= tolerance (format 3; `tolerance` in the figures' unit)", 3

    @property
    def tolerance(self) -> Decimal:
        return _decimal(None if self.spec.tolerance is UNSET else self.spec.tolerance, "tolerance", self.at)

    def check_shape(self, version: int) -> None:
        super().check_shape(version)
        if any(len(side) != 1 for side in self.sides):
            raise RecipeError(f"{self.at}: within compares two figures: `from: [a, b]`.")
        if self.tolerance < 0:
            raise RecipeError(f"{self.at}: within needs a tolerance >= 0, got {self.spec.tolerance!r}.")

    def holds(self, groups: list[list[Decimal]]) -> bool:
        return abs(groups[0][0] - groups[1][0]) <= self.tolerance


_OPS: dict[str, Callable[[Decimal, Decimal], bool]] = {"<": operator.lt, "<=": operator.le, ">": operator.gt,
                                                       ">=": operator.ge}


class AllHold(BooleanClaim):
    kind, description, introduced = "all", "every member of the group `op` the bound (format 3; op one of < <= > >=)", 3
    combine: ClassVar[Callable[[list[bool]], bool]] = all

    def check_shape(self, version: int) -> None:
        super().check_shape(version)
        if self.spec.op not in _OPS or len(self.sides[1]) != 1:
            raise RecipeError(f"{self.at}: {self.kind} needs op: one of {' '.join(_OPS)} and "
                              "`from: [[members...], bound]`.")

    def holds(self, groups: list[list[Decimal]]) -> bool:
        assert isinstance(self.spec.op, str)
        test, bound = _OPS[self.spec.op], groups[1][0]
        return type(self).combine([test(x, bound) for x in groups[0]])


class AnyHolds(AllHold):
    kind, description = "any", "at least one member of the group `op` the bound (format 3)"
    combine = any


class And(BooleanClaim):
    kind, description, introduced = "and", "every listed true/false figure or claim is true (format 3)", 3
    of_booleans = True

    @classmethod
    def may_group(cls, version: int) -> bool:
        return False

    def check_shape(self, version: int) -> None:
        Claim.check_shape(self, version)  # any number of sides

    def check_units(self, inputs: list[PrintedFigure]) -> None:
        return  # true/false

    def holds(self, groups: list[list[Decimal]]) -> bool:
        return all(x is True for g in groups for x in g)


NUMERIC_KINDS: tuple[type[NumericClaim], ...] = (
    MeanOf, Ratio, PercentLower, PercentGapClosed, Difference, Spread, Rounded, Product, Sum, Max, Min, Range, Median,
    Percentile, PercentChange, RelativeRange, Rank)
BOOLEAN_KINDS: tuple[type[BooleanClaim], ...] = (DisjointRanges, AllBelow, AtLeast, AtMost, Within, AllHold, AnyHolds, And)
KINDS: dict[str, type[Claim]] = {k.kind: k for k in (*NUMERIC_KINDS, *BOOLEAN_KINDS)}
DERIVATIONS = {k.kind: k.description for k in NUMERIC_KINDS}  # name -> what it computes
BOOLEAN_DERIVATIONS = {k.kind: k.description for k in BOOLEAN_KINDS}
FORMAT_3_OPERATORS = frozenset(name for name, k in KINDS.items() if k.introduced == 3)  # a test: all are used


# --- the file ----------------------------------------------------------------------------------------

def _sides(spec: ClaimSpec, kind: type[Claim], version: int, at: str) -> tuple[tuple[str, ...], ...]:
    """`from` as sides (a bare name is a side of one), refused where the kind takes no groups."""
    if spec.inputs is UNSET or not spec.inputs:
        raise RecipeError(f"{at}: `from` is a list of figure names (or, for booleans, of groups).")
    sides = tuple(tuple(g) if isinstance(g, list) else (g,) for g in spec.inputs)
    if sum(map(len, sides)) > MAX_ITEMS:
        raise RecipeError(f"{at}: `from` names more than {MAX_ITEMS} figures.")
    if not kind.may_group(version) and any(isinstance(g, list) for g in spec.inputs):
        raise RecipeError(f"{at}: {kind.kind} takes a flat list of figures; groups are for "
                          f"{', '.join(sorted(set(BOOLEAN_DERIVATIONS) - {'and'}))}.")
    return sides


@dataclass(frozen=True)
class ClaimsFile:
    """A claims file decoded once: its figures (base figures and stated claims, by name) and its claims in order."""

    version: int
    report: str | None
    experiment: str | None
    figures: dict[str, PrintedFigure]
    claims: tuple[Claim, ...]

    @classmethod
    def parse(cls, data: object, source: str = "<claims>") -> ClaimsFile:
        spec = _decode(data, source)
        figures = _base_figures(spec, source)
        printed: dict[str, str] = {}  # printed text -> the claim that states it
        claims = []
        for i, claim_spec in enumerate(spec.claims or []):
            claim = _claim(claim_spec, figures, spec.format_version, f"{source}: claims[{i}]")
            if spec.format_version >= 3:
                _check_printed(claim, printed)
            figures[claim.name] = claim.stated
            claims.append(claim)
        return cls(spec.format_version, spec.report, spec.experiment, figures, tuple(claims))

    def check(self) -> list[ClaimResult]:
        """Every claim recomputed from the printed figures, in order."""
        intervals = {n: f.interval for n, f in self.figures.items() if not isinstance(f.value, bool)}
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            ctx.Emax, ctx.Emin = 10**6, -(10**6)
            return [claim.check(self.figures, intervals, self.version) for claim in self.claims]


def _decode(data: object, source: str) -> FileSpec:
    """The file decoded as its format version reads it (format 3: every key known), within the size limit."""
    version = data.get("format_version") if isinstance(data, dict) else None
    if version not in CLAIMS_FORMAT_VERSIONS or isinstance(version, bool):
        raise RecipeError(f"{source}: not a claims file with format_version "
                          f"{', '.join(map(str, CLAIMS_FORMAT_VERSIONS[:-1]))} or {CLAIMS_FORMAT_VERSIONS[-1]}.")
    try:
        spec = msgspec.convert(data, StrictFileSpec if version >= 3 else FileSpec)
    except msgspec.ValidationError as exc:
        raise RecipeError(f"{source}: {exc}.") from None
    if len(spec.figures or {}) + len(spec.claims or []) > MAX_ITEMS:
        raise RecipeError(f"{source}: more than {MAX_ITEMS} figures and claims.")
    return spec


def _base_figures(spec: FileSpec, source: str) -> dict[str, PrintedFigure]:
    """The `figures` section (a bare value is a figure without unit or place; format 3 needs a unit)."""
    written = {name: f if isinstance(f, FigureSpec) else FigureSpec(value=f) for name, f in (spec.figures or {}).items()}
    undeclared = [name for name, f in written.items() if f.unit is UNSET]
    if spec.format_version >= 3 and undeclared:
        raise RecipeError(f"{source}: figures {undeclared[:5]} declare no unit (format 3 needs `unit`).")
    return {name: PrintedFigure.of(name, f, source) for name, f in written.items()}


def _claim(spec: ClaimSpec, figures: dict[str, PrintedFigure], version: int, at: str) -> Claim:
    """One claim of the file, of its kind, checked against the figures declared before it."""
    kind = KINDS.get(spec.derive)
    if kind is None:
        raise RecipeError(f"{at}: unknown derivation {spec.derive[:40]!r}; known: {', '.join(sorted(KINDS))}.")
    sides = _sides(spec, kind, version, at)
    claim = kind(spec=spec, stated=PrintedFigure.of(spec.name, spec, at), sides=sides, at=at)
    missing = [n for n in claim.names if n not in figures]
    if missing:
        raise RecipeError(f"{at}: {spec.name} derives from unknown figures {missing[:10]}; "
                          "declare them under figures or as an earlier claim.")
    claim.check_shape(version)
    if spec.name in figures:
        raise RecipeError(f"{at}: {spec.name!r} is declared twice.")
    inputs = [figures[n] for n in claim.names]
    claim.check_inputs(inputs)
    if version >= 3:
        claim.check_units(inputs)
    return claim


def _check_printed(claim: Claim, seen: dict[str, str]) -> None:
    """Format 3: the claim's printed text shows its stated value, and no other claim states that text."""
    text = "" if claim.spec.printed is UNSET else claim.spec.printed.strip()
    if not text:
        raise RecipeError(f"{claim.at}: {claim.name} needs `printed`: the text of the report it checks, "
                          "e.g. \"−3.81%\".")
    if text in seen:
        raise RecipeError(f"{claim.at}: {claim.name} states the printed text {text!r} that {seen[text]} already "
                          "states; one printed figure is one claim.")
    seen[text] = claim.name
    claim.check_printed(text)
    if not claim.shows(text):
        raise RecipeError(f"{claim.at}: {claim.name} states {claim.stated.value} but its printed text {text!r} does "
                          "not show that value with that sign and those decimals.")


def parse_claims(data: object, source: str = "<claims>") -> ClaimsFile:
    return ClaimsFile.parse(data, source)


def load_claims(path: Path) -> ClaimsFile:
    return ClaimsFile.parse(read_yaml(path, "claims file"), str(path))


def check_claims(parsed: ClaimsFile) -> list[ClaimResult]:
    return parsed.check()


# --- the printed results -------------------------------------------------------------------------------

def format_results(results: list[ClaimResult]) -> str:
    """One line per claim (and its finding), then the count: the text a pipe gets."""
    width = max((len(r.name) for r in results), default=0)
    derive_width = max((len(r.derive) for r in results), default=0) + 1
    lines = []
    for r in results:
        lines.append(f"{r.mark:<7} {r.name.ljust(width)}  {r.derive.ljust(derive_width)} stated {r.stated:>10}  "
                     f"recomputed {r.recomputed:>10}{f' ({r.note})' if r.note else ''}")
        lines += [f"        finding: {printable(r.finding)}"] if r.finding else []
    return "\n".join([*lines, summary_line(results)])


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A file's own text on one line: control characters shown as escapes."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def summary_line(results: list[ClaimResult]) -> str:
    failed = sum(r.failed for r in results)
    findings = sum(1 for r in results if r.status == "mismatch" and r.expected_mismatch)
    return f"{len(results)} claims: {failed} failed, {findings} declared findings."

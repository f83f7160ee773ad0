"""Cause 6 (issue 25): claims files whose operators leave their domain, or whose values or sizes are huge.

Each gives exactly one `error:` line naming the problem, no traceback, within seconds.
"""

from __future__ import annotations

import time

import pytest
import yaml
from advkit import invoke, one_error_line

FIG = {"a": "4.25", "b": "1.5", "zero": "0.00", "z": "0"}


def claims_file(tmp_path, claims, figures=None, version=2, raw: str | None = None):
    path = tmp_path / "claims.yaml"
    text = raw if raw is not None else yaml.safe_dump(
        {"format_version": version, "figures": figures or FIG, "claims": claims}, sort_keys=False)
    path.write_text(text)
    return path


@pytest.mark.parametrize("claims, message", [
    ([{"name": "r", "value": "1", "derive": "ratio", "from": ["a", "zero"]}],
     "claim r: ratio of [Decimal('4.25'), Decimal('0.00')] divides by zero; the claim has no value."),
    ([{"name": "r", "value": "1", "derive": "ratio", "from": ["zero", "z"]}],
     "claim r: ratio of [Decimal('0.00'), Decimal('0')] divides by zero; the claim has no value."),
    ([{"name": "p", "value": "1", "derive": "percent_lower", "from": ["zero", "a"]}],
     "claim p: percent_lower of [Decimal('0.00'), Decimal('4.25')] divides by zero; the claim has no value."),
    ([{"name": ["x"], "value": "1", "derive": "mean_of", "from": ["a"]}],
     ": Expected `str`, got `array` - at `$.claims[0].name`."),
    ([{"name": {"x": 1}, "value": "1", "derive": "mean_of", "from": ["a"]}],
     ": Expected `str`, got `object` - at `$.claims[0].name`."),
    ([{"name": "m", "value": "1", "derive": ["mean_of"], "from": ["a"]}],
     ": Expected `str`, got `array` - at `$.claims[0].derive`."),
])
def test_operator_domain_and_shapes(tmp_path, claims, message):
    line = one_error_line(invoke("claims", "--file", str(claims_file(tmp_path, claims))))
    assert line.endswith(message), line


@pytest.mark.parametrize("value", ["0." + "1" * 30, "1e30", "1" * 29])
def test_digit_and_magnitude_limits(tmp_path, value):
    line = one_error_line(invoke("claims", "--file", str(claims_file(tmp_path, [], {"x": value}))))
    assert line.endswith(f"figure 'x' has value '{value}': at most 24 significant digits, 20 decimals and a "
                         "magnitude below 1e24."), line


@pytest.mark.parametrize("decimals", [".inf", "100000"])
def test_decimals_limit(tmp_path, decimals):
    raw = f"format_version: 2\nfigures:\n  x: {{value: 1.5, decimals: {decimals}}}\nclaims: []\n"
    line = one_error_line(invoke("claims", "--file", str(claims_file(tmp_path, [], raw=raw))))
    shown = "inf" if decimals == ".inf" else decimals
    assert line.endswith(f"'x' decimals '{shown}' is not an integer in [0, 20]."), line


def test_product_of_26_figures_with_one_negative_answers_quickly(tmp_path):
    figures = {f"x{i}": "1.01" for i in range(25)} | {"neg": "-1.01"}
    exact = "-1.29525"  # -(1.01 ** 26) = -1.295256... rounded half-up to 5 decimals is -1.29526
    claims = [{"name": "p", "value": exact, "derive": "product", "from": list(figures)}]
    started = time.monotonic()
    proc = invoke("claims", "--file", str(claims_file(tmp_path, claims, figures)), timeout=60)
    assert time.monotonic() - started < 30  # 2**26 corners would take minutes; interval arithmetic is linear
    assert proc.returncode == 1 and "FAIL    p  product" in proc.stdout and "recomputed   -1.29526" in proc.stdout
    assert "(reachable within the inputs' rounding)" in proc.stdout and proc.stderr == ""


RANKED = {"a": {"value": "1.5", "unit": "ms"}, "b": {"value": "2.5", "unit": "ms"}, "c": {"value": "3.5", "unit": "ms"}}


def _rank_file(tmp_path, target, value, printed, order="ascending"):
    others = [n for n in RANKED if n != target]
    claim = {"name": "r", "value": value, "unit": "rank", "derive": "rank", "order": order, "from": [target, *others],
             "printed": printed}
    return claims_file(tmp_path, [claim], RANKED, version=3)


@pytest.mark.parametrize("target, value, printed, said", [
    ("a", "1", "a is the second fastest", 2),      # issue 40 item 9: passed on the keyword "fastest"
    ("a", "1", "a is the slowest of the three", 3),
    ("c", "3", "c is the fastest of the three", 1),
    ("b", "2", "b is the third fastest", 3),
])
def test_a_rank_in_words_must_mean_the_stated_rank(tmp_path, target, value, printed, said):
    line = one_error_line(invoke("claims", "--file", str(_rank_file(tmp_path, target, value, printed))))
    assert line.endswith(f"claims[0]: r states rank {value} but its printed text {printed!r} says rank {said}."), line


@pytest.mark.parametrize("target, value, printed, order", [
    ("a", "1", "a is the fastest", "ascending"),
    ("b", "2", "b is the second fastest", "ascending"),
    ("b", "2", "b is the 2nd slowest", "ascending"),
    ("c", "3", "c is the slowest", "ascending"),
    ("c", "1", "c is the highest", "descending"),
    ("a", "3", "a is the lowest", "descending"),
    ("b", "2", "| 2 | b |", "ascending"),             # a rank printed as a number
])
def test_a_rank_in_words_that_mean_it_passes(tmp_path, target, value, printed, order):
    proc = invoke("claims", "--file", str(_rank_file(tmp_path, target, value, printed, order)))
    assert proc.returncode == 0 and "OK      r  rank" in proc.stdout, proc.stdout + proc.stderr


def test_text_of_a_claims_file_never_forges_a_line(tmp_path):
    forged = "x\nerror: forged\x1b[2J"
    line = one_error_line(invoke("claims", "--file", str(claims_file(tmp_path, [], {forged: "1"}))))
    assert "Expected `str` matching regex" in line and "at `key` in `$.figures`" in line
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"format_version": 2, "report": forged, "figures": {"a": "1", "b": "1"},
                                    "claims": [{"name": "m", "value": "1", "derive": "mean_of", "from": ["a", "b"],
                                                "expect": "mismatch", "finding": forged}]}))
    proc = invoke("claims", "--file", str(path))
    assert proc.returncode == 1 and "\x1b" not in proc.stdout and "error:" not in proc.stdout.replace(
        "x\\nerror: forged", "")
    assert proc.stdout.splitlines()[0] == f"claims of x\\nerror: forged\\x1b[2J ({path}):"
    assert "        finding: x\\nerror: forged\\x1b[2J" in proc.stdout.splitlines()

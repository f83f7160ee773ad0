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
     "claims[0]: name and derive are text, got list and str."),
    ([{"name": {"x": 1}, "value": "1", "derive": "mean_of", "from": ["a"]}],
     "claims[0]: name and derive are text, got dict and str."),
    ([{"name": "m", "value": "1", "derive": ["mean_of"], "from": ["a"]}],
     "claims[0]: name and derive are text, got str and list."),
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

"""Each claims operator of format_version 2, its passing and failing cases, and version-1 compatibility."""

from __future__ import annotations

import pytest

from openjev_repro.audit.claims import check_claims, parse_claims
from openjev_repro.errors import RecipeError


def run(figures: dict, claim: dict, version: int = 2):
    parsed = parse_claims({"format_version": version, "report": "r", "experiment": "e", "figures": figures,
                           "claims": [{"name": "stated", **claim}]})
    (result,) = check_claims(parsed)
    return result


FIG = {"a": "4.25", "b": "1.5", "c": "2.75", "d": "0.5"}


@pytest.mark.parametrize("derive, inputs, right, wrong", [
    ("max", ["a", "b", "c"], "4.25", "2.75"),
    ("min", ["a", "b", "c"], "1.5", "1.4"),
    ("range", ["a", "b", "c"], "2.75", "2.7"),
    ("sum", ["a", "b", "c", "d"], "9.00", "9.01"),
    ("product", ["a", "b", "d"], "3.1875", "3.1876"),
    ("difference", ["a", "b", "c"], "0.00", "0.01"),  # first minus every other: 4.25 - 1.5 - 2.75
    ("median", ["a", "b", "c"], "2.75", "2.76"),
    ("median", ["a", "b", "c", "d"], "2.125", "2.12"),  # mean of the two middle values, one more decimal allowed
])
def test_numeric_operator_right_and_wrong(derive, inputs, right, wrong):
    good = run(FIG, {"value": right, "derive": derive, "from": inputs})
    assert good.status == "exact" and not good.failed, good
    bad = run(FIG, {"value": wrong, "derive": derive, "from": inputs})
    assert bad.status == "mismatch" and bad.failed


@pytest.mark.parametrize("rule, q, expected", [
    ("nearest_rank", 95, "19"),  # ceil(0.95 * 20) - 1 = 18 -> the 19th smallest
    ("jevbench", 95, "19"),      # int(0.95 * 20) - 1 = 18 as well at N = 20
    ("nearest_rank", 50, "10"),
    ("jevbench", 50, "10"),
])
def test_percentile_rules_at_twenty_values(rule, q, expected):
    figures = {f"x{i}": str(i + 1) for i in range(20)}
    result = run(figures, {"value": expected, "derive": "percentile", "q": q, "rule": rule, "from": list(figures)})
    assert result.status == "exact", result


def test_percentile_rules_differ_where_jevbench_truncates():
    # N = 74 (the JevBench noul set): nearest rank ceil(70.3) - 1 = 70, JevBench int(70.3) - 1 = 69.
    figures = {f"x{i}": str(i + 1) for i in range(74)}
    base = {"derive": "percentile", "q": 95, "from": list(figures)}
    assert run(figures, {**base, "rule": "nearest_rank", "value": "71"}).status == "exact"
    assert run(figures, {**base, "rule": "jevbench", "value": "70"}).status == "exact"
    assert run(figures, {**base, "rule": "jevbench", "value": "71"}).failed


def test_percentile_of_many_inputs_has_rounding_bounds_without_every_corner():
    figures = {f"x{i}": f"{i + 1}.0" for i in range(40)}  # 2**40 corners would never finish
    result = run(figures, {"value": "38.1", "derive": "percentile", "q": 95, "rule": "nearest_rank",
                           "from": list(figures)})
    assert result.failed and result.within_rounding  # 38.1 prints 38.05..38.15; inputs reach up to 38.05
    far = run(figures, {"value": "37.0", "derive": "percentile", "q": 95, "rule": "nearest_rank",
                        "from": list(figures)})
    assert far.failed and not far.within_rounding


@pytest.mark.parametrize("claim, message", [
    ({"value": "1", "derive": "percentile", "from": ["a"]}, "needs rule"),
    ({"value": "1", "derive": "percentile", "rule": "nearest_rank", "q": 0, "from": ["a"]}, r"q in \(0, 100\]"),
    ({"value": "1", "derive": "percentile", "rule": "nearest_rank", "q": 101, "from": ["a"]}, r"q in \(0, 100\]"),
    ({"value": "1", "derive": "percentile", "rule": "jevbench", "q": 10, "from": ["a", "b", "c"]}, "outside the list"),
    ({"value": "1", "derive": "max", "q": 95, "from": ["a"]}, "belong to percentile"),
    ({"value": "1", "derive": "max", "from": [["a", "b"]]}, "flat list"),
    ({"value": "1", "derive": "product", "from": ["a"]}, "at least 2"),
    ({"value": "1", "derive": "difference", "from": ["a"]}, "at least 2"),
    ({"value": "1", "derive": "rounded", "from": ["a", "b"]}, "takes 1 figures"),
    ({"value": True, "derive": "at_least", "from": [["a", "b"], ["c", "d"]]}, "ambiguous"),
    ({"value": True, "derive": "at_most", "from": ["a", "b", "c"]}, "two sides"),
    ({"value": "1", "derive": "at_least", "from": ["a", "b"]}, "states true or false"),
])
def test_malformed_operator_shapes_are_refused(claim, message):
    with pytest.raises(RecipeError, match=message):
        run(FIG, claim)


@pytest.mark.parametrize("derive, inputs, holds", [
    ("at_least", [["a", "c"], "b"], True),      # 4.25 >= 1.5 and 2.75 >= 1.5
    ("at_least", [["a", "d"], "b"], False),     # 0.5 >= 1.5 fails: every member counts, not the first
    ("at_least", ["a", ["b", "c"]], True),
    ("at_least", ["c", ["b", "a"]], False),     # 2.75 >= 4.25 fails
    ("at_most", [["b", "d"], "c"], True),
    ("at_most", [["b", "a"], "c"], False),      # the second member, 4.25 <= 2.75, fails
    ("at_most", ["d", "b"], True),
])
def test_at_least_at_most_hold_for_every_member(derive, inputs, holds):
    assert run(FIG, {"value": True, "derive": derive, "from": inputs}).status == ("exact" if holds else "mismatch")
    assert run(FIG, {"value": False, "derive": derive, "from": inputs}).status == ("mismatch" if holds else "exact")


def test_grouped_at_least_checks_every_member_in_version_1_too():
    assert run(FIG, {"value": True, "derive": "at_least", "from": [["a", "d"], "b"]}, version=1).failed


def test_rounded_refuses_more_decimals_than_its_input():
    ok = run({"x": "0.063"}, {"value": "0.06", "derive": "rounded", "from": ["x"]})
    assert ok.status == "exact"
    padded = run({"x": "0.063"}, {"value": "0.06300", "derive": "rounded", "from": ["x"]})
    assert padded.failed and not padded.within_rounding and "states 5 decimals" in padded.detail
    assert run({"x": "0.063"}, {"value": "0.06300", "derive": "rounded", "from": ["x"]}, version=1).failed


def test_version_1_keeps_its_grammar():
    with pytest.raises(RecipeError, match="needs format_version 2"):
        run(FIG, {"value": "4.25", "derive": "max", "from": ["a", "b"]}, version=1)
    with pytest.raises(RecipeError, match="n-ary needs format_version 2"):
        run(FIG, {"value": "3.1875", "derive": "product", "from": ["a", "b", "d"]}, version=1)
    assert run(FIG, {"value": "2.75", "derive": "difference", "from": ["a", "b"]}, version=1).status == "exact"


def test_every_documented_example_reproduces():
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[1] / "docs" / "manifest.md").read_text()
    examples = re.findall(r"\| `(\w+)`[^|]*\|[^|]*\| `(\{.*?\})` \| [12]", text)
    examples3 = re.findall(r"\| `(\w+)`[^|]*\|[^|]*\| `(\{.*?\})` \| 3 \|", text)
    documented = {name for name, _ in examples + examples3} | {"range"}  # documented in one row with spread
    from openjev_repro.audit.claims import BOOLEAN_DERIVATIONS, DERIVATIONS
    assert documented == set(DERIVATIONS) | set(BOOLEAN_DERIVATIONS)
    claims = [{**yaml.safe_load(example), "name": f"example{i}"} for i, (_, example) in enumerate(examples)]
    parsed = parse_claims({"format_version": 2, "figures": FIG, "claims": claims})
    assert [r.name for r in check_claims(parsed) if r.status != "exact"] == []
    figures3 = {**{k: {"value": v, "unit": "ms"} for k, v in FIG.items()}, "t": {"value": True, "unit": ""}}
    claims3 = [{**yaml.safe_load(example), "name": f"example{i}"} for i, (_, example) in enumerate(examples3)]
    parsed3 = parse_claims({"format_version": 3, "figures": figures3, "claims": claims3})
    assert len(claims3) == 7 and [r.name for r in check_claims(parsed3) if r.status != "exact"] == []

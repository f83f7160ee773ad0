"""Claims format 3: the new operators, strict keys, printed text, units, signed zero, chained rounding."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from openjev_repro.audit.claims import FORMAT_3_OPERATORS, check_claims, load_claims, parse_claims
from openjev_repro.errors import RecipeError

ROOT = Path(__file__).resolve().parents[1]
PREFILL = ROOT / "manifests" / "published" / "system1-omni-prefill-packing-h200-2026-10-06.yaml"
FIG = {"a": {"value": "4.25", "unit": "ms"}, "b": {"value": "1.5", "unit": "ms"}, "c": {"value": "2.75", "unit": "ms"},
       "d": {"value": "0.5", "unit": "ms"}, "t": {"value": True, "unit": ""}, "f": {"value": False, "unit": ""}}


def run(claim: dict, figures: dict | None = None):
    parsed = parse_claims({"format_version": 3, "report": "r", "experiment": "e", "figures": figures or FIG,
                           "claims": [{"name": "stated", **claim}]})
    (result,) = check_claims(parsed)
    return result


@pytest.mark.parametrize("claim, right, wrong", [
    ({"derive": "percent_change", "unit": "%", "from": ["a", "b"]}, "-64.71", "64.71"),  # (1.5 - 4.25) / 4.25
    ({"derive": "percent_change", "unit": "%", "from": [["a", "c"], "b"]}, "-57.14", "-57.15"),  # group: its mean
    ({"derive": "relative_range", "unit": "%", "from": ["a", "b", "c"]}, "97.06", "97.05"),  # 2.75 / 2.8333
    ({"derive": "rank", "unit": "rank", "from": ["b", "a", "c", "d"]}, "2", "1"),  # only d is lower
    ({"derive": "rank", "unit": "rank", "order": "descending", "from": ["b", "a", "c", "d"]}, "3", "2"),
])
def test_new_numeric_operators(claim, right, wrong):
    good = run({**claim, "value": right, "printed": f"{right} here"})
    assert good.status == "exact" and not good.failed, good
    bad = run({**claim, "value": wrong, "printed": f"{wrong} here"})
    assert bad.status == "mismatch" and bad.failed


@pytest.mark.parametrize("claim, holds", [
    ({"derive": "within", "tolerance": "1.5", "from": ["a", "c"]}, True),    # |4.25 - 2.75| = 1.5
    ({"derive": "within", "tolerance": "1.49", "from": ["a", "c"]}, False),
    ({"derive": "all", "op": "<", "from": [["b", "d", "c"], "a"]}, True),
    ({"derive": "all", "op": "<", "from": [["b", "a"], "c"]}, False),      # 4.25 < 2.75 fails
    ({"derive": "any", "op": ">", "from": [["b", "a"], "c"]}, True),
    ({"derive": "any", "op": ">=", "from": [["b", "d"], "c"]}, False),
    ({"derive": "and", "from": ["t", "t"]}, True),
    ({"derive": "and", "from": ["t", "f"]}, False),
])
def test_new_true_false_operators(claim, holds):
    assert run({**claim, "value": True, "printed": "holds"}).status == ("exact" if holds else "mismatch")
    assert run({**claim, "value": False, "printed": "holds"}).status == ("mismatch" if holds else "exact")


@pytest.mark.parametrize("claim, message", [
    ({"value": "2.83", "unit": "ms", "derive": "mean_of", "from": ["a", "b", "c"], "printed": "2.83", "tolerance": "1"},
     None),  # tolerance is a known key (of within); accepted
    ({"value": "2.83", "unit": "ms", "derive": "mean_of", "from": ["a", "b", "c"], "printed": "2.83", "tolrance": "1"},
     r"unknown field `tolrance` - at `\$\.claims\[0\]`"),
    ({"value": "2.83", "derive": "mean_of", "from": ["a", "b", "c"], "printed": "2.83"}, "declares no unit"),
    ({"value": "2.83", "unit": "s", "derive": "mean_of", "from": ["a", "b", "c"], "printed": "2.83"}, "is in 's'"),
    ({"value": "64.71", "unit": "ms", "derive": "percent_lower", "from": ["a", "b"], "printed": "64.71"}, "'%'"),
    ({"value": "2.83", "unit": "ms", "derive": "mean_of", "from": ["a", "b", "c"]}, "needs `printed`"),
    ({"value": "2.83", "unit": "ms", "derive": "mean_of", "from": ["a", "b", "c"], "printed": "−2.83 ms"},
     "does not show that value"),
    ({"value": True, "derive": "all", "op": "!=", "from": [["a"], "b"], "printed": "x"}, "needs op"),
    ({"value": True, "derive": "within", "from": ["a", "b"], "printed": "x"}, "tolerance"),
    ({"value": True, "derive": "and", "from": ["a", "t"], "printed": "x"}, "true/false figures or claims only"),
    ({"value": "1", "unit": "rank", "derive": "rank", "order": "up", "from": ["a", "b"], "printed": "1"}, "ascending"),
])
def test_strict_format_3_shapes(claim, message):
    if message is None:
        assert run(claim).status == "exact"
        return
    with pytest.raises(RecipeError, match=message):
        run(claim)


def test_mixed_units_and_an_undeclared_figure_unit_are_refused():
    with pytest.raises(RecipeError, match="mixes units"):
        run({"value": "2.88", "unit": "ms", "derive": "mean_of", "from": ["a", "x"], "printed": "2.88"},
            {**FIG, "x": {"value": "1.5", "unit": "s"}})
    with pytest.raises(RecipeError, match="declare no unit"):
        run({"value": "2.88", "unit": "ms", "derive": "mean_of", "from": ["a", "x"], "printed": "2.88"},
            {**FIG, "x": "1.5"})


def test_two_claims_stating_the_same_printed_text_are_refused():
    data = {"format_version": 3, "figures": FIG, "claims": [
        {"name": "m1", "value": "2.83", "unit": "ms", "derive": "mean_of", "from": ["a", "b", "c"], "printed": "2.83 ms"},
        {"name": "m2", "value": "2.83", "unit": "ms", "derive": "mean_of", "from": ["a", "c", "b"], "printed": "2.83 ms"}]}
    with pytest.raises(RecipeError, match="that m1 already states"):
        parse_claims(data)


def test_signed_zero_keeps_its_sign():
    figures = {"x": {"value": "100.00", "unit": "ms"}, "y": {"value": "100.001", "unit": "ms"}}
    # (100.001 - 100.00) / 100.00 * 100 = +0.001%: printed as 0.00 it reproduces, as -0.00 it does not.
    plus = run({"value": "0.00", "unit": "%", "derive": "percent_change", "from": ["x", "y"], "printed": "0.00%"}, figures)
    minus = run({"value": "−0.00", "unit": "%", "derive": "percent_change", "from": ["x", "y"], "printed": "−0.00%"},
                figures)
    assert plus.status == "exact" and minus.status == "mismatch" and minus.stated == "-0.00"
    down = run({"value": "-0.00", "unit": "%", "derive": "percent_change", "from": ["y", "x"], "printed": "-0.00%"},
               figures)
    assert down.status == "exact" and down.recomputed == "-0.00"


def test_rounding_reachability_carries_through_chains():
    # A chain where the intermediate's printed interval (1.0: [0.95, 1.05]) is wider than what its inputs allow.
    figures = {"p": {"value": "1.00", "unit": "ms"}, "q": {"value": "1.00", "unit": "ms"}, "two": {"value": "2.00", "unit": ""}}
    chain = [{"name": "m", "value": "1.0", "unit": "ms", "derive": "mean_of", "from": ["p", "q"], "printed": "1.0 ms"},
             {"name": "twice", "value": "2.09", "unit": "ms", "derive": "product", "from": ["m", "two"],
              "printed": "2.09 ms"}]
    v3 = check_claims(parse_claims({"format_version": 3, "figures": figures, "claims": chain}))
    plain = [{k: v for k, v in c.items() if k != "printed"} for c in chain]
    v2 = check_claims(parse_claims({"format_version": 2, "figures": figures, "claims": plain}))
    # m's printed 1.0 allows [0.95, 1.05], so 2.09 looks reachable in format 2; p and q allow only
    # [0.995, 1.005], so in format 3 the product lies in [1.985, 2.015] and 2.09 is not reachable.
    assert v2[1].within_rounding and not v3[1].within_rounding and v3[1].failed


def test_format_1_and_2_files_keep_working_and_prefill_file_runs_in_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "invoke", "claims", "--file", str(PREFILL)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "17 claims: 0 failed, 0 declared findings." in proc.stdout, proc.stderr
    used = {c["derive"] for c in yaml.safe_load(PREFILL.read_text())["claims"]}
    assert {"percent_change", "within", "all", "any", "and"} <= used
    data = yaml.safe_load(PREFILL.read_text())
    data["figures"]["q8.packed.pass2"]["value"] = "157.878"  # one digit
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True))
    proc = subprocess.run([sys.executable, "-m", "invoke", "claims", "--file", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "FAIL    red.q8" in proc.stdout


def test_committed_claims_3_files_together_use_every_new_operator():
    files = [p for p in sorted((ROOT / "manifests" / "published").glob("*.yaml"))
             if yaml.safe_load(p.read_text())["format_version"] == 3]
    used = {claim["derive"] for p in files for claim in yaml.safe_load(p.read_text())["claims"]}
    assert len(files) >= 2 and FORMAT_3_OPERATORS == {"percent_change", "relative_range", "rank", "within", "all",
                                                      "any", "and"}
    assert FORMAT_3_OPERATORS <= used, sorted(FORMAT_3_OPERATORS - used)
    for path in files:  # and each of those files checks out
        results = check_claims(load_claims(path))
        assert results and not [r.name for r in results if r.failed], path.name


def test_one_committed_claims_3_file_uses_every_new_operator():
    """Our own H200 reference study (results/h200-reference-27b-shape/README.md) in one file, every operator on a
    printed figure; a one-digit change of a pass mean fails its relative range."""
    path = ROOT / "manifests" / "published" / "openjev-repro-h200-reference-rerun-2026-11-29.yaml"
    claims = yaml.safe_load(path.read_text())["claims"]
    assert FORMAT_3_OPERATORS <= {c["derive"] for c in claims}
    mutated = path.read_text().replace('"285.337"', '"286.337"')
    assert mutated != path.read_text()
    spread = {r.name: r for r in check_claims(parse_claims(yaml.safe_load(mutated)))}["raw.spread"]
    assert spread.failed

"""Claims files: derived figures recomputed from printed base figures at the printed rounding."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from invoking import invoke

from openjev_repro.audit.claims import check_claims, load_claims, parse_claims
from openjev_repro.errors import RecipeError

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = sorted((ROOT / "manifests" / "published").glob("*.yaml"))


def claims(figures: dict, items: list) -> dict:
    return {"format_version": 1, "report": "r", "experiment": "e", "figures": figures, "claims": items}


def test_published_experiments_are_shipped():
    assert [p.name for p in PUBLISHED] == [
        "open-jev-h200-cuda-graph-2026-10-03.yaml",
        "open-jev-h200-hf-comparison-2026-10-03.yaml",
        "open-jev-h200-packed-silu-2026-10-02.yaml",
        "openjev-repro-h200-reference-rerun-2026-11-29.yaml",
        "system1-omni-decider-2b-rtx4090-2026-10-07.yaml",
        "system1-omni-lfm2-350m-l40s-2026-09-28.yaml",
        "system1-omni-prefill-packing-h200-2026-10-06.yaml",
        "system1-omni-public231-leaderboard-h800-2026-10-07.yaml",
    ]


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.stem)
def test_published_claims_reproduce_except_declared_findings(path):
    results = check_claims(load_claims(path))
    assert results and not [r.name for r in results if r.failed]


def test_the_findings_are_exactly_these():
    findings = {r.name: (r.stated, r.recomputed, r.within_rounding)
                for p in PUBLISHED for r in check_claims(load_claims(p)) if r.status == "mismatch"}
    assert findings == {
        "fixed.graph8": ("18.882", "18.883", True),
        "fast.mean.spread": ("6.436", "6.437", True),
        "gap_closed.long_silu": ("94.19", "94.20", True),
        # lfm2 RESULTS.md's token-target reuse "p50 change": printed from the unrounded p50s
        "reuse.c16.short.b32.change": ("-3.81", "-3.82", True),
        "reuse.c16.short.all.change": ("-3.94", "-3.96", True),
        "reuse.c16.long.b32.change": ("-1.28", "-1.27", True),
        "reuse.c16.long.all.change": ("-2.07", "-2.06", True),
    }


def test_headline_figures_are_checked():
    by_name = {r.name: r for p in PUBLISHED for r in check_claims(load_claims(p))}
    for name, value in [("speedup.native_vs_hf", "7.47"), ("percent_lower.native_vs_hf", "86.61"),
                        ("percent_lower.native_vs_fast", "4.78"), ("percent_lower.mixed.graph64", "2.03"),
                        ("percent_lower.fixed.graph64", "3.77"), ("memory.graph64_minus_graph8", "122"),
                        ("percent_lower.packed_vs_scalar", "2.483"), ("percent_lower.long_silu", "69.93"),
                        ("hf.mean", "362.209"), ("native.mean", "48.503"), ("fast.mean", "50.936")]:
        assert by_name[name].stated == value and by_name[name].status == "exact"


def test_inconsistent_figure_fails_and_rounding_is_half_up():
    parsed = parse_claims(claims(
        {"a": "362.238", "b": "362.180", "x": "0.2", "y": "0.3"},
        [{"name": "mean", "value": "362.300", "derive": "mean_of", "from": ["a", "b"]},
         {"name": "near", "value": "362.210", "derive": "mean_of", "from": ["a", "b"]},
         {"name": "half_up", "value": "0.3", "derive": "mean_of", "from": ["x", "y"]}]))
    mean, near, half_up = check_claims(parsed)
    assert mean.failed and mean.recomputed == "362.209" and not mean.within_rounding
    assert near.failed and near.within_rounding  # still a mismatch: no fudging of the rounding
    assert not half_up.failed and half_up.recomputed == "0.3"  # 0.25 rounds half-up, not to even


def test_stale_finding_fails():
    parsed = parse_claims(claims({"a": "1.000", "b": "3.000"},
                                 [{"name": "m", "value": "2.000", "derive": "mean_of", "from": ["a", "b"],
                                   "expect": "mismatch", "finding": "old"}]))
    (result,) = check_claims(parsed)
    assert result.status == "exact" and result.failed


@pytest.mark.parametrize("data, message", [
    ({"format_version": 4}, "format_version 1, 2 or 3"),
    (claims({"a": "1"}, [{"name": "m", "value": "1", "derive": "median_of", "from": ["a"]}]), "unknown derivation"),
    (claims({"a": "1"}, [{"name": "m", "value": "1", "derive": "ratio", "from": ["a", "zz"]}]), "unknown figures"),
    (claims({"a": "1"}, [{"name": "m", "value": "1", "derive": "ratio", "from": ["a"]}]), "takes 2 figures"),
    (claims({"a": "one"}, []), "not a number"),
])
def test_malformed_claims_files_are_refused(data, message):
    with pytest.raises(RecipeError, match=message):
        parse_claims(data)


def test_cli_exit_status(tmp_path):
    good = invoke("claims", "--file", str(PUBLISHED[2]), cwd=ROOT, timeout=120)
    assert good.returncode == 0 and "FINDING gap_closed.long_silu" in good.stdout
    bad_file = tmp_path / "bad.yaml"
    data = yaml.safe_load(PUBLISHED[1].read_text())
    next(c for c in data["claims"] if c["name"] == "speedup.native_vs_hf")["value"] = "7.48"
    bad_file.write_text(yaml.safe_dump(data))
    bad = invoke("claims", "--file", str(bad_file), cwd=ROOT, timeout=120)
    assert bad.returncode == 1 and "FAIL    speedup.native_vs_hf" in bad.stdout and "1 failed" in bad.stdout


@pytest.mark.slow  # a real pseudo-terminal runs invoke: tests/tiers.py's rule does not see it
def test_claims_on_an_80_column_terminal_keep_every_word_and_name_whole():
    """Issue 41 item 2 for `claims`: at 80 columns a table whose names and words are never split or cut;
    through a pipe the one-line-per-claim text (the tests above) is unchanged."""
    from invoking import on_terminal
    from rich.cells import cell_len

    screen = on_terminal("claims", "--file", str(PUBLISHED[2]), columns=80)
    code, lines = screen.code, screen.lines
    assert code == 0, "\n".join(lines)
    assert [line for line in lines if cell_len(line) > 80] == []
    assert any(line.split()[:4] == ["OK", "max_probability_delta.consistent", "0.03435", "0.03435"] for line in lines)
    words = " ".join(" ".join(lines).split())
    assert "FINDING gap_closed.long_silu 94.19 94.20 percent_gap_closed; reachable within" in words
    assert "the printed 94.19 is reachable only from the unrounded two-trace means (or by truncation)." in words
    assert "16 claims: 0 failed, 2 declared findings." in lines

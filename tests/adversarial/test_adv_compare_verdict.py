"""Cause 5 of issue 25 (and issue 26/27's verdict items): compare never passes what it should fail.

Non-finite limits are refused, a missing counterpart or a failed measured request fails with or
without tolerances, `--out` never lets one output overwrite another, hostile tolerance and
import.json shapes give one error line (or are ignored), "no limits declared" is never PASS,
and a PASS lists the limits it checked.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from advkit import invoke, one_error_line
from audit_kit import build_run

from openjev_repro.evidence.rows import RowWriter, read_rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verdict")
    a = build_run(tmp / "a", seed=1)
    slow = build_run(tmp / "slow", backends={"hf": 3000.0, "native": 400.0}, seed=2)  # 10x slower
    extra = build_run(tmp / "extra", backends={"hf": 300.0, "native": 40.0, "other": 50.0}, seed=2)
    failing = build_run(tmp / "failing", seed=2)
    rows = read_rows(failing.rows_path)
    first = next(i for i, r in enumerate(rows) if r.phase == "measured" and r.backend == "native")
    rows[first] = dataclasses.replace(rows[first], status=500, probability=None, decision=None, error="HTTP 500")
    failing.rows_path.unlink()
    with RowWriter(failing.rows_path) as writer:
        for row in rows:
            writer.write(row)
    return a, slow, extra, failing


def _compare(base, cand, *extra):
    return invoke("compare", "--baseline", str(base.path), "--candidate", str(cand.path), *extra)


@pytest.mark.parametrize("text", ["max_mean_ratio: .nan\n", "max_mean_ratio: .inf\n",
                                  "per_backend: {native: {max_mean_ratio: .nan}}\n",
                                  "max_p95_ratio: -.inf\n"])
def test_non_finite_limits_are_refused(runs, tmp_path, text):
    a, slow, _, _ = runs
    tol = tmp_path / "tol.yaml"
    tol.write_text("format_version: 1\n" + text)
    line = one_error_line(_compare(a, slow, "--tolerances", str(tol)))
    assert "must be a finite number >= 0, not" in line


@pytest.mark.parametrize("text, message", [
    ("backends: [1]\n", "backends maps a baseline backend name to a candidate backend name"),
    ("backends: {hf: [1]}\n", "backends maps a baseline backend name to a candidate backend name"),
    ("per_backend: {1: {max_mean_ratio: 1}}\n", "per_backend maps a baseline backend name to its limits"),
    ("per_backend: [1]\n", "per_backend maps a baseline backend name to its limits"),
])
def test_hostile_tolerance_shapes_give_one_error_line(runs, tmp_path, text, message):
    a, slow, _, _ = runs
    tol = tmp_path / "tol.yaml"
    tol.write_text("format_version: 1\n" + text)
    assert message in one_error_line(_compare(a, slow, "--tolerances", str(tol)))
    tol.write_text("format_version: true\nmax_mean_ratio: 1.1\n")
    assert "format_version True is not a format this tool reads" in one_error_line(
        _compare(a, slow, "--tolerances", str(tol)))


def test_a_backend_without_counterpart_fails_without_tolerances(runs):
    a, _, extra, _ = runs
    proc = _compare(extra, a)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "**Verdict: FAIL**" in proc.stdout
    assert "- backend mixed/other has no counterpart in the other run" in proc.stdout


def test_failed_measured_requests_fail_without_tolerances(runs):
    a, _, _, failing = runs
    proc = _compare(a, failing)
    assert proc.returncode == 1 and "**Verdict: FAIL**" in proc.stdout
    assert "mixed/native→native: failed requests in the measured passes" in proc.stdout


def test_no_limits_is_never_pass_and_says_where_limits_come_from(runs, tmp_path):
    a, slow, _, _ = runs
    proc = _compare(a, slow)
    assert proc.returncode == 0 and "PASS" not in proc.stdout
    assert "**Verdict: no limits declared**" in proc.stdout
    assert "declare limits with --tolerances FILE" in proc.stdout
    mapping_only = tmp_path / "map.yaml"  # a mapping alone declares no limit (issue 26)
    mapping_only.write_text("format_version: 1\nbackends: {hf: hf, native: native}\n")
    proc = _compare(a, slow, "--tolerances", str(mapping_only))
    assert proc.returncode == 0 and "PASS" not in proc.stdout and "**Verdict: no limits declared**" in proc.stdout


def test_a_pass_lists_the_limits_checked(runs, tmp_path):
    a, _, _, _ = runs
    tol = tmp_path / "tol.yaml"
    tol.write_text("format_version: 1\nmax_mean_ratio: 1.5\ndecisions_must_match: true\n")
    proc = _compare(a, a, "--tolerances", str(tol))
    assert proc.returncode == 0 and "**Verdict: PASS**" in proc.stdout
    checked = proc.stdout.split("Limits checked:\n", 1)[1].splitlines()
    assert checked[:4] == ["- mixed/hf→hf: mean ratio 1 <= 1.5", "- mixed/hf→hf: decisions match (0 flips)",
                           "- mixed/native→native: mean ratio 1 <= 1.5",
                           "- mixed/native→native: decisions match (0 flips)"]


def test_out_never_lets_one_output_overwrite_another(runs, tmp_path):
    a, slow, _, _ = runs
    out = tmp_path / "x.md"
    line = one_error_line(_compare(a, slow, "--out", str(out)))
    assert "would be overwritten by the Markdown written beside it" in line and not out.exists()
    proc = _compare(a, slow, "--out", str(tmp_path / "x.json"))
    assert json.loads((tmp_path / "x.json").read_text())["verdict"]["passed"] is None
    assert (tmp_path / "x.md").read_text().startswith("### mixed") and proc.returncode == 0


@pytest.mark.parametrize("figures, error", [
    ('"x"', "Expected `array`, got `str` - at `$.figures`"),
    ('["x", 1]', "Expected `object`, got `str` - at `$.figures[0]`"),
    ('{"a": 1}', "Expected `array`, got `object` - at `$.figures`"),
])
def test_a_damaged_import_record_is_one_error_line(tmp_path, figures, error):
    run = build_run(tmp_path / "r", seed=1)
    (run.path / "import.json").write_text('{"format_version": 1, "format": "x", "source": "s", "files_verified": 0, '
                                          '"rows": 0, "figures": ' + figures + "}")
    line = one_error_line(invoke("compare", "--baseline", str(run.path), "--candidate", str(run.path)))
    assert "import.json" in line and error in line
    (run.path / "import.json").write_text("[1, 2]")
    assert "import.json" in one_error_line(invoke("compare", "--baseline", str(run.path), "--candidate", str(run.path)))


@pytest.mark.parametrize("figures", ['[{"arm": "hf vs hf", "figure": 5, "published": "1"}]',
                                     '[{"arm": "hf vs hf", "figure": "mean_reduction_percent"}]'])
def test_published_figures_of_another_shape_are_ignored(tmp_path, figures):
    run = build_run(tmp_path / "r", seed=1)
    (run.path / "import.json").write_text('{"format_version": 1, "format": "x", "source": "s", "files_verified": 0, '
                                          '"rows": 0, "figures": ' + figures + "}")
    proc = invoke("compare", "--baseline", str(run.path), "--candidate", str(run.path))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "**Verdict: no limits declared**" in proc.stdout
    assert "published" not in proc.stdout


def _with_recipe(run, change):
    """The run's recipe.yaml edited by `change` (compare reads the recipe of each run as it is)."""
    import yaml

    recipe = yaml.safe_load(run.file("recipe.yaml").read_text())
    change(recipe)
    run.file("recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return run


def test_runs_of_recipes_that_measure_differently_fail_and_say_why(tmp_path):
    """Issue 41 item 7: two runs of different recipes got "Verdict: PASS" without a word about the recipes."""
    a = build_run(tmp_path / "a", seed=1)
    b = _with_recipe(build_run(tmp_path / "b", seed=2), lambda r: r["protocol"].update(request_timeout_s=30))
    tol = tmp_path / "tol.yaml"
    tol.write_text("format_version: 1\nmax_mean_ratio: 1.5\n")
    proc = _compare(a, b, "--tolerances", str(tol))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    verdict = proc.stdout.split("**Verdict:", 1)[1].splitlines()
    assert verdict[:2] == [" FAIL**", "- the recipes measure differently: protocol.request_timeout_s: 120.0 vs 30.0"]


def test_a_recipe_difference_beyond_what_was_measured_is_listed_not_failed(tmp_path):
    a = build_run(tmp_path / "a", seed=1)
    b = _with_recipe(build_run(tmp_path / "b", seed=2), lambda r: r.update(controls={"memory_sample_period_ms": 50}))
    tol = tmp_path / "tol.yaml"
    tol.write_text("format_version: 1\nmax_mean_ratio: 1.5\n")
    proc = _compare(a, b, "--tolerances", str(tol))
    assert proc.returncode == 0 and "**Verdict: PASS**" in proc.stdout
    assert "- the recipes differ beyond their backends: controls.memory_sample_period_ms: 100 vs 50" in proc.stdout
    assert "recipes measure differently" not in proc.stdout


@pytest.mark.parametrize("base_open, cand_open, line", [
    ({"arrivals": "fixed"}, {"arrivals": "poisson", "seed": 7},
     'workloads[mixed].load.open.arrivals: "fixed" vs "poisson"'),
    ({"arrivals": "poisson", "seed": 7}, {"arrivals": "poisson", "seed": 8}, "workloads[mixed].load.open.seed: 7 vs 8"),
])
def test_an_open_level_of_other_arrivals_or_another_seed_is_never_compared_silently(tmp_path, base_open, cand_open,
                                                                                     line):
    """Issue 40 item 10: compare paired Poisson with fixed arrivals, or two seeds, as the same level without a word."""
    from test_load_statistics import run_rows
    from test_load_verify import signed_load_run

    rows = [r for r in run_rows("a") if r.error is None]
    runs = [signed_load_run(tmp_path / name, rows)[0] for name in ("one", "two")]
    for run, spec in zip(runs, (base_open, cand_open), strict=True):
        _with_recipe(run, lambda r, spec=spec: r["workloads"][0]["load"]["open"].update(spec))
    proc = invoke("compare", "--baseline", str(runs[0].path), "--candidate", str(runs[1].path))
    assert proc.returncode == 1 and "| open-r10 |" in proc.stdout  # the level's figures are shown, and it fails
    assert proc.stdout.split("**Verdict:", 1)[1].splitlines()[:2] == [
        " FAIL**", f"- the recipes measure differently: {line}"]


def test_recipe_text_with_control_characters_stays_on_its_line(tmp_path):
    a = build_run(tmp_path / "a", seed=1)
    forged = "extra.jsonl\nerror: forged\x1b[2J"
    b = _with_recipe(build_run(tmp_path / "b", seed=2),
                     lambda r: r["inputs"]["files"].append({"path": forged, "sha256": "0" * 64}))
    proc = _compare(a, b)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "\x1b" not in proc.stdout
    assert not any(line.startswith("error:") for line in proc.stdout.splitlines())
    assert ('- the recipes differ beyond their backends: inputs.files[extra.jsonl\\nerror: forged\\u001b[2J]: '
            'absent vs {"path": "extra.jsonl\\nerror: forged\\u001b[2J", "sha256": "…') in proc.stdout

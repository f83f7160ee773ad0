"""compare's Environment differences, the different-project-code line and two-sided mean limits,
on two real (scripted-backend) runs whose recorded environment files are then edited."""

import json
import shutil

import pytest
from studykit import scripted_backend, write_study

from openjev_repro.audit.compare import check_tolerances, compare_runs, to_markdown
from openjev_repro.orchestrator.runner import StudyOptions, run_study


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("envcompare")
    recipe = write_study(tmp, [scripted_backend("one")], n=3)
    a = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp / "runs"))
    b = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp / "runs"))
    return a.path, b.path


def _edit(path, name, change):
    data = json.loads((path / name).read_text())
    change(data)
    (path / name).write_text(json.dumps(data))


def test_same_code_same_environment_gives_no_differences_and_no_project_line(two_runs):
    result = compare_runs(*two_runs)
    (pair,) = result.pairs
    assert pair.environment is not None  # lane identity adds load_average as an item: two runs may differ in it
    assert [d for d in pair.environment.differences if d.item not in ("cpu_model", "load_average")] == []
    assert result.verdict.project_code is None and result.verdict.explanations == []
    assert "Environment differences (baseline vs candidate):" in to_markdown(result)


def test_a_different_source_digest_is_always_said_and_listed(two_runs, tmp_path):
    a, b = (shutil.copytree(p, tmp_path / n) for p, n in zip(two_runs, "ab", strict=True))
    _edit(b, "environment.json", lambda d: d["project_source"].update(sha256="f" * 64))
    result = compare_runs(a, b)
    assert str(result.verdict.project_code).startswith("the two runs ran different project code: source digest")
    assert any(d["item"] == "project_source" for d in result.to_json()["pairs"][0]["environment"]["differences"])
    assert "- the two runs ran different project code" in to_markdown(result).split("**Verdict:", 1)[1]
    _edit(b, "environment.json", lambda d: d.pop("project_source"))  # an older run: no digest
    _edit(b, "environment.json", lambda d: d["project_git"].update(dirty=True))  # whatever this checkout is
    note = str(compare_runs(a, b).verdict.project_code)
    assert note.startswith("the two runs may have run different project code") and "one run only" in note


def test_min_mean_ratio_makes_much_faster_a_finding(two_runs):
    tolerances = check_tolerances({"format_version": 1, "min_mean_ratio": 1.5, "max_mean_ratio": 2.0}, "t.yaml")
    verdict = compare_runs(*two_runs, tolerances=tolerances).verdict
    assert verdict.passed is False
    assert any("is below 1.5 (much faster than the baseline is a finding too)" in f for f in verdict.failures)
    assert compare_runs(*two_runs, tolerances={"format_version": 1, "min_mean_ratio": 0.5}).verdict.passed
    with pytest.raises(Exception, match="min_mean_ratio must be a finite number"):
        check_tolerances({"format_version": 1, "min_mean_ratio": "fast"}, "t.yaml")


def test_fla_in_one_run_only_is_named_as_the_explanation_of_flips(two_runs, tmp_path):
    a, b = (shutil.copytree(p, tmp_path / n) for p, n in zip(two_runs, "ab", strict=True))
    _edit(a, "backends.json", lambda d: d["backends"]["one"].update(kernels={"linear_attention": "reference"}))
    _edit(b, "backends.json", lambda d: d["backends"]["one"].update(kernels={"linear_attention": "fla"}))
    rows = (b / "rows.jsonl").read_text().splitlines()
    changed = []
    for line in rows:
        row = json.loads(line)
        if row.get("phase") == "measured" and row.get("probability") is not None:
            row["probability"] = 1 - row["probability"]  # every decision flips
        changed.append(json.dumps(row))
    (b / "rows.jsonl").write_text("\n".join(changed) + "\n")
    (explained,) = compare_runs(a, b).verdict.explanations
    assert "can be explained by FLA kernels in one run and not the other; implementations.linear_attention: " \
           "reference vs fla" in explained

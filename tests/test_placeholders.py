"""The one placeholder filler (study/placeholders.py) and its three users: preparation steps, the
plan and the runner's launch command. An unknown placeholder is refused everywhere, naming it and
where it was; only names declared deferred are left for a later step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from studykit import write_study

from openjev_repro.errors import RecipeError
from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.orchestrator.runner import StudyOptions, StudyRun, _Launcher, plan_study, read_plan
from openjev_repro.study.placeholders import LAUNCH_NAMES, fill
from openjev_repro.study.planner import resolve_plan
from openjev_repro.study.preparation import plan_prepare
from openjev_repro.study.resolved import resolve_recipe


def test_fill_replaces_in_one_pass_and_keeps_deferred_names():
    values = {"inputs": "/in", "python": "{port}"}  # a value is never scanned again
    assert fill("{python} {inputs}/x {port}", values, "here", deferred={"port"}) == "{port} /in/x {port}"
    assert fill("no placeholders } at all", {}, "here") == "no placeholders } at all"


@pytest.mark.parametrize("template, message", [
    ("{python} {bogus}", r"step s: unknown placeholder \{bogus\} in '\{python\} \{bogus\}'; known: \{inputs\}, \{port\}, \{python\}"),
    ("{}", r"step s: unknown placeholder \{\}"),
    ("{python", r"step s: unclosed placeholder in '\{python'"),
    ("{inputs{python}", r"step s: unclosed placeholder"),
])
def test_fill_refuses_unknown_and_unclosed(template, message):
    with pytest.raises(RecipeError, match=message):
        fill(template, {"python": "py", "inputs": "/in"}, "step s", deferred={"port"})


def _recipe(tmp_path: Path, command: list[str], aux: list[dict] | None = None) -> Path:
    backend = {"name": "b", "command": command, **({"aux": aux} if aux else {})}
    return write_study(tmp_path, [backend])


def test_plan_refuses_an_unknown_placeholder_naming_backend(tmp_path):
    path = _recipe(tmp_path, ["{python}", "serve", "--model", "{modle}"])
    with pytest.raises(RecipeError, match=r"backend b command: unknown placeholder \{modle\}"):
        resolve_plan(resolve_recipe(path, apply_lock=False))


def test_plan_leaves_launch_names_and_earlier_aux_ports_for_the_runner(tmp_path):
    aux = [{"name": "worker", "command": ["{python}", "w", "--port", "{port}"]}]
    path = _recipe(tmp_path, ["{python}", "s", "--port", "{port}", "--worker", "{port.worker}", "--in", "{inputs}",
                              "--run", "{run}", "--host", "{host}", "--name", "{backend}"], aux)
    plan = resolve_plan(resolve_recipe(path, apply_lock=False)).to_json()
    argv = plan["backends"][0]["command"]["argv"]
    assert argv[:6] == ["{python}", "s", "--port", "{port}", "--worker", "{port.worker}"]
    assert argv[7] == str(tmp_path / "inputs") and argv[8:] == ["--run", "{run}", "--host", "{host}", "--name", "{backend}"]
    assert {"python", "port", "host", "run", "backend"} <= LAUNCH_NAMES


def test_plan_refuses_a_port_of_a_later_or_unknown_aux(tmp_path):
    aux = [{"name": "first", "command": ["{python}", "--to", "{port.second}"]}, {"name": "second", "command": ["{python}"]}]
    path = _recipe(tmp_path, ["{python}"], aux)
    with pytest.raises(RecipeError, match=r"backend b.first command: unknown placeholder \{port.second\} .*earlier aux"):
        resolve_plan(resolve_recipe(path, apply_lock=False))


def test_preparation_step_refuses_an_unknown_placeholder(tmp_path):
    path = write_study(tmp_path, [{"name": "b", "command": ["{python}"]}], extra={"preparation": {"steps": [
        {"name": "build", "command": ["{python}", "{source.missing}/x"], "produces": "out.txt"}]}})
    with pytest.raises(RecipeError, match=r"preparation step build command: unknown placeholder \{source.missing\}"):
        plan_prepare(load_recipe(path), path, probe=False)


def _plan_file(tmp_path: Path, recipe: Path, edit=None) -> Path:
    """`invoke plan --out`'s file for `recipe`, with `edit` applied to its JSON (an edited plan)."""
    planned = plan_study(StudyOptions(recipe_path=recipe, inputs_root=tmp_path / "inputs")).planned.to_json()
    if edit is not None:
        edit(planned)
    path = tmp_path / "plan.json"
    write_json_atomic(path, planned)
    return path


def test_runner_launch_refuses_an_unknown_placeholder(tmp_path):
    # A plan file is run as written: an argv edited to name {gpu} is refused when the plan is read, not mid-run.
    path = _recipe(tmp_path, ["{python}", "serve"])
    edited = _plan_file(tmp_path, path, lambda plan: plan["backends"][0]["command"]["argv"].extend(["--gpu", "{gpu}"]))
    with pytest.raises(RecipeError, match=r"backend b command: unknown placeholder \{gpu\}"):
        read_plan(edited)
    ok_path = _recipe(tmp_path / "ok", ["{python}", "--w", "{port.worker}"],
                      [{"name": "worker", "command": ["x", "{port}", "{port.worker}"]}])
    study = read_plan(_plan_file(tmp_path / "ok", ok_path))
    backend = study.planned.backends[0]
    run = RunDir.create(tmp_path / "runs", study.study.recipe.study.id)
    launcher = _Launcher(StudyRun(run, study, StudyOptions(recipe_path=ok_path)), backend, None)
    worker = launcher.spec(backend.aux[0])  # started first, as the runner does: its port is then known
    # An aux process's own {port.<name>} is its {port} (the published cuda-graph recipe's worker uses it).
    assert worker.argv == ["x", str(worker.port), str(worker.port)]
    assert launcher.spec(backend.command).argv == [sys.executable, "--w", str(worker.port)]

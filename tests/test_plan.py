"""The resolved plan of the three published recipes, pin validation, and `invoke plan`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.errors import RecipeError
from openjev_repro.evidence.recipe import load_recipe, parse_recipe
from openjev_repro.study.planner import check_pins, resolve_plan
from openjev_repro.study.resolved import resolve_recipe

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "recipes").glob("open-jev-h200-*.yaml"))


def test_three_published_recipes_exist():
    assert [p.name for p in RECIPES] == [
        "open-jev-h200-cuda-graph-2026-10-03.yaml",
        "open-jev-h200-hf-comparison-2026-10-03.yaml",
        "open-jev-h200-packed-silu-2026-10-02.yaml",
    ]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_plan_renders_and_is_json(path, tmp_path):
    plan = resolve_plan(resolve_recipe(path, inputs_root_override=tmp_path, apply_lock=False)).to_json()
    assert json.loads(json.dumps(plan)) == plan
    assert plan["inputs_root"] == str(tmp_path)
    assert plan["needs_preparation"] and "requests/jevbench-noul-74.jsonl" in plan["unpinned"]
    kinds = {c["kind"] for c in plan["pins"]["checked"]}
    assert kinds == {"sha256", "commit", "hf_revision", "gpu_uuid"}
    assert plan["controls"]["gpu"] == {"index": 2, "uuid": "GPU-cbf66259-f4ab-0ede-1811-82037dde5924"}
    assert plan["controls"]["cpus"] == "0-15" and plan["controls"]["numa_node"] == 0
    assert plan["pins"]["temperature"] == 2.5343690298472983 and plan["pins"]["max_length"] == 16384
    for b in plan["backends"]:  # every backend is timed through the same Rust frontend
        assert b["command"]["argv"] == [f"{tmp_path}/build/native/release/omni-jev"]
        assert b["command"]["env"]["OMNI_JEV_BIND"] == "{host}:{port}"
        assert b["stop_order"] == ["command"] + [a["name"] for a in reversed(b["aux"])]
    assert "{inputs}" not in json.dumps(plan["backends"])


def test_hf_comparison_plan():
    path = ROOT / "recipes/open-jev-h200-hf-comparison-2026-10-03.yaml"
    plan = resolve_plan(resolve_recipe(path, apply_lock=False)).to_json()
    by = {b["name"]: b for b in plan["backends"]}
    assert set(by) == {"hf", "native", "fast"}
    hf = by["hf"]["aux"][0]
    assert hf["argv"][1:3] == ["-m", "openjev_repro.upstream.hf_raw"] and "16384" in hf["argv"]
    assert hf["env"]["PYTHONPATH"] == str(ROOT)
    assert by["native"]["aux"][0]["env"]["CUA_S1_GRAPH"] == "0"
    assert by["fast"]["aux"][0]["argv"][-1].endswith("src/open-jev-fast/scripts/launch_server.sh")
    # one pass sequence per backend, in recipe order, each on its own server with the same steps
    assert [p["backend"] for p in plan["passes"]] == [b["name"] for b in plan["backends"]] == ["hf", "native", "fast"]
    for sequence in plan["passes"]:
        steps = [(s["phase"], s.get("workload"), s.get("pass")) for s in sequence["steps"]]
        assert steps == [("first", None, None), ("warmup", None, None), ("feasibility", "jevbench-noul-74", 1),
                         ("measured", "jevbench-noul-74", 1), ("measured", "jevbench-noul-74", 2)], sequence["backend"]
    lib = next(h for h in plan["hashes"] if h["path"] == "build/cuda-packed/libqwen3_5_cuda.so")
    assert lib["sha256"] == "e033315d4c67127809e62f41d991a149ac8ee0ce81827997af063815fd00d435"
    req = next(h for h in plan["hashes"] if h["path"] == "requests/jevbench-noul-74.jsonl")
    assert req["published_sha256"] == "0c756a7b0b4c1f1352225f2e01770b5b3a0646fe86d5cc6930ded9e292ef37df"
    commits = {s["name"]: s["commit"] for s in plan["preparation"]["sources"]}
    assert commits["open-jev"] == "3308a15ccd7eea1df7a37d6ddc39b023b801ba16"
    assert commits["jevbench"] == "f8ce71361165846101d02ebc83ad44e47ae44fc3"
    export = next(a for a in plan["preparation"]["actions"] if a["name"] == "export-merged")
    assert export["argv"][1].endswith("src/system1-omni/recipe/open_jev/export_merged.py")


def test_cuda_graph_plan_gates_and_passes():
    path = ROOT / "recipes/open-jev-h200-cuda-graph-2026-10-03.yaml"
    plan = resolve_plan(resolve_recipe(path, apply_lock=False)).to_json()
    gates = {g["name"]: g for g in plan["gates"]}
    assert gates["short-mean-reduction"]["min_percent"] == 3.0 and gates["short-mean-reduction"]["every_pass"]
    assert gates["mixed-mean-reduction"]["min_percent"] == 2.0 and gates["mixed-mean-reduction"]["workload"] == "jevbench-noul-74"
    assert [p["backend"] for p in plan["passes"]] == ["native-eager", "native-graph8", "native-graph64"]
    for sequence in plan["passes"]:
        phases = [(s["phase"], s.get("workload")) for s in sequence["steps"]]
        # each workload is warmed up before its passes (what the runner always did; the plan now says so)
        assert phases[1:] == [("warmup", "short-107"), ("feasibility", "short-107"), ("measured", "short-107"),
                              ("measured", "short-107"), ("warmup", "jevbench-noul-74"),
                              ("feasibility", "jevbench-noul-74"), ("measured", "jevbench-noul-74"),
                              ("measured", "jevbench-noul-74")], sequence["backend"]
    assert plan["protocol"]["warmup"]["longest_of"] == "jevbench-noul-74"
    graph = {b["name"]: b["aux"][0]["env"]["CUA_S1_GRAPH"] for b in plan["backends"]}
    assert graph == {"native-eager": "0", "native-graph8": "1", "native-graph64": "1"}
    recipe = load_recipe(path)
    assert [w.repeat for w in recipe.workloads] == [32, 1]


def test_packed_silu_plan_traces(tmp_path):
    path = ROOT / "recipes/open-jev-h200-packed-silu-2026-10-02.yaml"
    from openjev_repro.backend.synthetic import H200_NOUL_INPUT_TOKENS  # the published counts, in request order

    counts = {"input_tokens": H200_NOUL_INPUT_TOKENS}
    (tmp_path / "data").mkdir()
    (tmp_path / "data/jevbench-noul-74-input-tokens.json").write_text(json.dumps(counts))
    text = path.read_text().replace("  enabled: false", "  enabled: true")
    enabled = tmp_path / path.name
    enabled.write_text(text)
    plan = resolve_plan(resolve_recipe(enabled, inputs_root_override=tmp_path, apply_lock=False)).to_json()
    items = plan["traces"]["items"]
    assert len(items) == 18 and {i["tokens"] for i in items} == {107, 936, 3399}
    assert {i["wrap"] for i in items if i["backend"] != "fast"} == {"worker"}
    kinds = {g["name"]: g["kind"] for g in plan["gates"]}
    assert kinds == {"gpu-test-suite": "external", "decisions-unchanged": "decisions_unchanged",
                     "probability-delta": "max_probability_delta", "long-silu-kernel-reduction": "external",
                     "warm-mean-reduction": "mean_reduction"}


def _mutated(tmp_path, old: str, new: str) -> Path:
    src = ROOT / "recipes/open-jev-h200-hf-comparison-2026-10-03.yaml"
    text = src.read_text()
    assert old in text
    out = tmp_path / src.name
    out.write_text(text.replace(old, new, 1))
    return out


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize("old,new", [
    ("commit: 3308a15ccd7eea1df7a37d6ddc39b023b801ba16", "commit: 3308a15ccd7eea1df7a37d6ddc39b023b801ba1"),
    ("revision: 28cf73067d5b337860bbef3c85b8b82ba8730956", "revision: main"),
    ("sha256: e033315d4c67127809e62f41d991a149ac8ee0ce81827997af063815fd00d435}",
     "sha256: E033315d4c67127809e62f41d991a149ac8ee0ce81827997af063815fd00d435}"),
])
def test_malformed_pin_names_file_and_line(tmp_path, old, new):
    path = _mutated(tmp_path, old, new)
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert f"{path}:{_line_of(path, new)}:" in str(err.value)


def test_malformed_gpu_uuid_fails_plan_with_line(tmp_path):
    bad = "GPU-cbf66259f4ab-0ede-1811-82037dde59245"  # 36 characters, wrong grouping: passes the schema
    path = _mutated(tmp_path, "GPU-cbf66259-f4ab-0ede-1811-82037dde5924", bad)
    with pytest.raises(RecipeError) as err:
        check_pins(load_recipe(path), path)
    assert f"{path}:{_line_of(path, bad)}: controls.gpu.uuid" in str(err.value)


def test_unpinned_needs_preparation_section():
    text = """
format_version: 1
study: {id: s, date: 2026-10-01, purpose: p}
inputs: {root: ., files: [{path: r.jsonl, sha256: unpinned}]}
workloads: [{name: w, requests: r.jsonl}]
backends: [{name: b, command: [x]}]
"""
    with pytest.raises(RecipeError, match="preparation"):
        parse_recipe(text, "t.yaml")


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "invoke"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def test_invoke_plan_renders_every_recipe():
    for path in RECIPES:
        done = _invoke("plan", "--recipe", str(path))
        assert done.returncode == 0, done.stderr
        assert "gates:" in done.stdout and "GPU-cbf66259-f4ab-0ede-1811-82037dde5924" in done.stdout
    done = _invoke("plan", "--recipe", str(RECIPES[0]), "--json")
    assert json.loads(done.stdout)["study"]["id"] == "open-jev-h200-cuda-graph-2026-10-03"


def test_invoke_plan_bad_recipe_is_one_line_error(tmp_path):
    path = _mutated(tmp_path, "revision: 28cf73067d5b337860bbef3c85b8b82ba8730956", "revision: main")
    done = _invoke("plan", "--recipe", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{path}:{_line_of(path, 'revision: main')}" in done.stderr


def test_plan_is_a_typed_record_whose_json_is_plan_json(tmp_path):
    """resolve_plan returns evidence.plan.Plan: attributes for `invoke plan`, to_json() for plan.json."""
    from openjev_repro.evidence.plan import PLAN_FORMAT_VERSION, Plan

    plan = resolve_plan(resolve_recipe(RECIPES[0], inputs_root_override=tmp_path, apply_lock=False))
    assert isinstance(plan, Plan) and plan.format_version == PLAN_FORMAT_VERSION
    assert plan.study.id == "open-jev-h200-cuda-graph-2026-10-03" and plan.controls.gpu is not None
    first = plan.backends[0]
    assert first.start_order == (*[a.name for a in first.aux], "command") and first.is_launched
    assert [s.label() for s in plan.passes[0].steps][:2] == ["first", "warmup short-107"]
    data = plan.to_json()
    assert data["format_version"] == PLAN_FORMAT_VERSION and data["needs_preparation"] is plan.needs_preparation
    assert json.loads(json.dumps(data)) == data  # plain JSON: what the runner writes and `--json` prints


def test_a_backend_working_directory_is_filled_in_the_plan_as_its_argv_is(tmp_path):
    """`cwd: "{inputs}/..."` (recipes/demo-third-party.yaml) is the inputs root in plan.json, as in the argv: the
    runner fills only launch-time names, so a cwd left unfilled stopped the third-party study."""
    from studykit import scripted_backend, write_study

    backend = {**scripted_backend("one"), "cwd": "{inputs}/requests"}
    path = write_study(tmp_path, [backend])
    planned = resolve_plan(resolve_recipe(path, apply_lock=False))
    (only,) = planned.backends
    assert only.workdir == str((tmp_path / "inputs" / "requests").resolve())

"""Preparation on a fake JevBench checkout (a real git repository in a tmp dir), the inputs lock."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.errors import InputMismatch, RecipeError, UnsupportedFormat
from openjev_repro.evidence.recipe import RequestSelection, load_recipe
from openjev_repro.study.preparation import locked_recipe, plan_prepare, read_lock, run_prepare, select_requests
from openjev_repro.study.resolved import resolve_recipe

ROOT = Path(__file__).resolve().parent.parent


def _task(case: str, kind: str) -> str:
    # Deliberately unusual spacing/key order: the selection must keep lines byte-exact.
    return f'{{"id": "{case}",  "question": {{"type": "{kind}", "instructions": "Q?"}}, "state": {{"b": 1, "a": "ü"}}, "expected": "yes"}}'


def make_jevbench(tmp: Path) -> tuple[Path, str]:
    repo = tmp / "jevbench-origin"
    (repo / "datasets/public").mkdir(parents=True)
    files = {"original": [("o1", "noul"), ("o2", "choice"), ("o3", "noul")],
             "easy": [("e1", "score"), ("e2", "noul")],
             "hard": [("h1", "noul"), ("h2", "choice")]}
    for name, tasks in files.items():
        (repo / f"datasets/public/{name}.jsonl").write_text("\n".join(_task(i, k) for i, k in tasks) + "\n\n", encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "fake jevbench"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return repo, commit


def test_select_requests_file_order_byte_exact(tmp_path):
    repo, _ = make_jevbench(tmp_path)
    lines = select_requests(repo, RequestSelection(source="jevbench", dest="r.jsonl", expect_count=4))
    assert [json.loads(ln)["id"] for ln in lines] == ["o1", "o3", "e2", "h1"]
    assert lines[0] == _task("o1", "noul").encode()
    one = select_requests(repo, RequestSelection(source="jevbench", dest="r.jsonl", positions=[3]))
    assert [json.loads(ln)["id"] for ln in one] == ["e2"]


def test_select_requests_count_mismatch_is_clear(tmp_path):
    repo, _ = make_jevbench(tmp_path)
    with pytest.raises(InputMismatch, match="has 4 tasks .* expects 74"):
        select_requests(repo, RequestSelection(source="jevbench", dest="r.jsonl", expect_count=74))
    with pytest.raises(InputMismatch, match="no datasets/public/missing.jsonl"):
        select_requests(repo, RequestSelection(source="jevbench", dest="r.jsonl", files=["datasets/public/missing.jsonl"]))


def _recipe(tmp: Path, url: str, commit: str, step_sha: str = "unpinned") -> Path:
    made = hashlib.sha256(b"built\n").hexdigest() if step_sha == "right" else step_sha
    text = f"""
format_version: 1
study: {{id: tiny-prepare, date: 2026-10-01, purpose: test}}
inputs:
  root: inputs
  files:
    - {{path: requests/noul.jsonl, sha256: unpinned}}
    - {{path: build/out.txt, sha256: "{made}"}}
preparation:
  sources:
    - {{name: jevbench, url: "{url}", commit: {commit}, dest: src/jevbench}}
  requests:
    - {{source: jevbench, dest: requests/noul.jsonl, expect_count: 4}}
  steps:
    - name: build
      command: ["{{python}}", "-c", "import pathlib,sys; p=pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); p.write_text('built\\\\n')", "{{inputs}}/build/out.txt"]
      produces: build/out.txt
  lock_trees: [src/jevbench/datasets]
workloads: [{{name: w, requests: requests/noul.jsonl}}]
backends: [{{name: b, command: ["{{python}}"]}}]
"""
    path = tmp / "recipes" / "tiny.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_prepare_end_to_end_writes_lock_and_fills_hashes(tmp_path):
    repo, commit = make_jevbench(tmp_path)
    path = _recipe(tmp_path, str(repo), commit, step_sha="right")
    recipe = load_recipe(path)
    with pytest.raises(RecipeError, match="run `invoke prepare"):
        locked_recipe(recipe, path)  # study refuses before preparation
    assert [a.done for a in plan_prepare(recipe, path)][:3] == [False, False, False]
    said: list[str] = []
    lock = run_prepare(recipe, path, say=said.append)
    requests = tmp_path / "recipes/inputs/requests/noul.jsonl"
    assert [json.loads(ln)["id"] for ln in requests.read_text().splitlines()] == ["o1", "o3", "e2", "h1"]
    assert lock["files"]["requests/noul.jsonl"]["sha256"] == hashlib.sha256(requests.read_bytes()).hexdigest()
    assert (tmp_path / "recipes/locks/tiny-prepare.inputs.lock").is_file()
    locked = locked_recipe(recipe, path)
    assert not locked.unpinned()
    assert "src/jevbench/datasets/public/hard.jsonl" in {f.path for f in locked.inputs.files}
    # A second run does nothing but verify.
    said.clear()
    run_prepare(recipe, path, say=said.append)
    assert sum(s.startswith("done already") for s in said) == 3



def test_a_recipe_is_resolved_once_with_its_lock(tmp_path):
    """resolve_recipe: the declared recipe, the lock applied, the root and the lock path, all from one read."""
    repo, commit = make_jevbench(tmp_path)
    path = _recipe(tmp_path, str(repo), commit, step_sha="right")
    with pytest.raises(RecipeError, match="run `invoke prepare"):
        resolve_recipe(path)  # a study cannot resolve it before preparation
    declared = resolve_recipe(path, apply_lock=False)  # what `invoke plan` shows
    assert declared.recipe is declared.declared and declared.recipe.unpinned() and not declared.locked
    run_prepare(load_recipe(path), path, say=lambda _: None)
    study = resolve_recipe(path, inputs_root_override=tmp_path / "elsewhere")
    assert study.locked and not study.recipe.unpinned() and study.declared.unpinned() == ["requests/noul.jsonl"]
    assert study.recipe == locked_recipe(load_recipe(path), path)
    assert study.root == (tmp_path / "elsewhere").resolve() and study.path == path
    assert study.lock_path == tmp_path / "recipes/locks/tiny-prepare.inputs.lock"
    assert resolve_recipe(path).root == (tmp_path / "recipes/inputs").resolve()

def test_prepare_refuses_a_changed_pinned_input(tmp_path):
    repo, commit = make_jevbench(tmp_path)
    path = _recipe(tmp_path, str(repo), commit, step_sha="0" * 64)
    with pytest.raises(InputMismatch, match="build/out.txt has sha256 .* the recipe pins 0000"):
        run_prepare(load_recipe(path), path, say=lambda _: None)


def test_stale_lock_is_refused(tmp_path):
    repo, commit = make_jevbench(tmp_path)
    path = _recipe(tmp_path, str(repo), commit, step_sha="right")
    run_prepare(load_recipe(path), path, say=lambda _: None)
    moved = path.read_text().replace(commit, "f" * 40)
    path.write_text(moved)
    with pytest.raises(RecipeError, match="other pins"):
        read_lock(load_recipe(path), path)


def test_lock_of_another_format_version_is_unsupported(tmp_path):
    """The inputs lock goes through evidence.files.check_format: UnsupportedFormat names the file."""
    repo, commit = make_jevbench(tmp_path)
    path = _recipe(tmp_path, str(repo), commit, step_sha="right")
    run_prepare(load_recipe(path), path, say=lambda _: None)
    lock = tmp_path / "recipes/locks/tiny-prepare.inputs.lock"
    lock.write_text(lock.read_text().replace('"format_version": 1', '"format_version": 7'))
    with pytest.raises(UnsupportedFormat, match=r"tiny-prepare\.inputs\.lock \(an inputs lock\): format_version 7 is not"):
        read_lock(load_recipe(path), path)
    lock.write_text("[]")
    with pytest.raises(UnsupportedFormat, match="has no format_version"):
        read_lock(load_recipe(path), path)


def test_invoke_prepare_dry_run_changes_nothing(tmp_path):
    recipe = ROOT / "recipes/open-jev-h200-hf-comparison-2026-10-03.yaml"
    done = subprocess.run([str(Path(sys.executable).parent / "invoke"), "prepare", "--recipe", str(recipe),
                           "--inputs", str(tmp_path / "in"), "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "[todo] download base: Download Qwen/Qwen3.8-27B@1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0" in done.stdout
    assert "export_merged.py --base" in done.stdout
    assert not (tmp_path / "in").exists()

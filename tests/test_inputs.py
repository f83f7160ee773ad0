import pytest
from invoking import invoke
from studykit import scripted_backend, write_study

from openjev_repro.errors import InputMismatch
from openjev_repro.evidence.recipe import inputs_root, load_recipe
from openjev_repro.study.inputs import require_all_ok, verify_inputs


def _setup(tmp_path):
    path = write_study(tmp_path, [scripted_backend("a")])
    recipe = load_recipe(path)
    return recipe, inputs_root(path, recipe)


def test_all_inputs_ok(tmp_path):
    recipe, root = _setup(tmp_path)
    checks = verify_inputs(recipe, root)
    assert [c.status for c in checks] == ["ok"]
    require_all_ok(checks, root)


def test_changed_missing_and_undeclared(tmp_path):
    recipe, root = _setup(tmp_path)
    (root / "requests" / "extra.txt").write_text("not declared")
    target = root / "requests" / "cases.jsonl"
    target.write_bytes(target.read_bytes() + b" ")
    statuses = {c.path: c.status for c in verify_inputs(recipe, root)}
    assert statuses == {"requests/cases.jsonl": "changed", "requests/extra.txt": "undeclared"}
    target.unlink()
    checks = verify_inputs(recipe, root)
    assert {c.path: c.status for c in checks}["requests/cases.jsonl"] == "missing"
    with pytest.raises(InputMismatch, match=r"\(requests/cases.jsonl missing, requests/extra.txt undeclared\); "
                                            r"no backend was started; restore them\.$"):
        require_all_ok(checks, root)


def test_verify_inputs_task_exit_status(tmp_path):
    path = write_study(tmp_path, [scripted_backend("a")])
    ok = invoke("verify-inputs", "--recipe", str(path), timeout=None)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (tmp_path / "inputs" / "requests" / "cases.jsonl").write_text("changed\n")
    bad = invoke("verify-inputs", "--recipe", str(path), timeout=None)
    assert bad.returncode == 1
    assert "changed" in bad.stdout and "do not match" in bad.stderr

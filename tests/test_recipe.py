import pytest
from studykit import scripted_backend, write_study

from openjev_repro.errors import RecipeError
from openjev_repro.evidence.recipe import load_recipe, parse_duration, parse_recipe


def test_valid_recipe_loads(tmp_path):
    recipe = load_recipe(write_study(tmp_path, [scripted_backend("a"), scripted_backend("b")]))
    assert [b.name for b in recipe.backends] == ["a", "b"]
    assert recipe.passes_for(recipe.workloads[0]) == (1, 2)


def test_bad_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("format_version: 1\nstudy: {id: x\n")
    with pytest.raises(RecipeError, match=r"r\.yaml:\d+: not valid YAML"):
        load_recipe(path)


def test_unknown_field_names_line_and_path(tmp_path):
    path = write_study(tmp_path, [scripted_backend("a")])
    text = path.read_text().replace("  command:", "  colour: red\n  command:", 1)
    path.write_text(text)
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "colour" in ln)
    assert f"recipe.yaml:{line}: backends[0].colour: Extra inputs are not permitted" in str(err.value)


def test_wrong_type_is_reported_with_path(tmp_path):
    path = write_study(tmp_path, [scripted_backend("a")], protocol={"measured_passes": "two"})
    with pytest.raises(RecipeError, match=r"protocol\.measured_passes"):
        load_recipe(path)


def test_unsupported_format_version():
    with pytest.raises(RecipeError, match="format_version 9 is not supported"):
        parse_recipe("format_version: 9\n", "x.yaml")


def test_gate_must_name_a_backend(tmp_path):
    gate = {"name": "g", "kind": "decisions_unchanged", "workload": "mixed", "a": "a", "b": "nope"}
    with pytest.raises(RecipeError, match="'nope' is not a backend"):
        load_recipe(write_study(tmp_path, [scripted_backend("a")], gates=[gate]))


def test_workload_requests_must_be_declared(tmp_path):
    path = write_study(tmp_path, [scripted_backend("a")])
    path.write_text(path.read_text().replace("requests: requests/cases.jsonl", "requests: other.jsonl"))
    with pytest.raises(RecipeError, match="not a declared input"):
        load_recipe(path)


@pytest.mark.parametrize("text,seconds", [("10m", 600.0), ("45m", 2700.0), ("30s", 30.0), ("1h", 3600.0), ("250ms", 0.25)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(ValueError):
        parse_duration("ten minutes")

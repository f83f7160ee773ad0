"""A recipe's `reproduction:` section (evidence/reproduction.py): what it accepts, and one line naming the field
for what it refuses (hostile numbers included)."""

from __future__ import annotations

import pytest
import yaml
from audit_kit import recipe_dict

from openjev_repro.errors import RecipeError
from openjev_repro.evidence.recipe import parse_recipe

MARGINS = {"mean": [0.9, 1.1], "p50": [0.9, 1.1], "p95": [0.8, 1.25], "decision_flips": 0,
           "max_probability_delta": 0.0}


def _recipe(reproduction: dict) -> str:
    return yaml.safe_dump({**recipe_dict(), "reproduction": reproduction}, sort_keys=False)


def test_study_margins_with_a_backend_override():
    recipe = parse_recipe(_recipe({"basis": "measured", "margins": MARGINS,
                                   "backends": {"hf": {"basis": "CPU-bound", "margins": {"mean": [0.67, 1.5]}}}}))
    section = recipe.reproduction
    assert section.margins_of("hf").mean == (0.67, 1.5) and section.margins_of("hf").p95 == (0.8, 1.25)
    assert section.margins_of("native").mean == (0.9, 1.1)
    assert "weights_fingerprint" in section.must_match and "cpu_model" in section.should_match


@pytest.mark.parametrize(("change", "words"), [
    ({"margins": {**MARGINS, "mean": [1.1, 1.2]}}, "must hold 1.0"),
    ({"margins": {**MARGINS, "p95": [0.9, float("nan")]}}, "margins.p95"),
    ({"margins": {**MARGINS, "p50": [0.9, 1e300]}}, "margins.p50"),
    ({"margins": {**MARGINS, "decision_flips": -1}}, "decision_flips"),
    ({"margins": {**MARGINS, "max_probability_delta": "0.1; rm"}}, "reproduction.margins: Input should be a valid number"),
    ({"backends": {"nope": {"margins": {"mean": [0.9, 1.1]}}}}, "nope, not a backend of this recipe"),
    ({"must_match": ["gpu_model"], "should_match": ["gpu_model"]}, "both must_match and should_match"),
    ({"must_match": ["gpu_colour"]}, "must_match"),
    ({"basis": ""}, "basis"),
    ({"extra": 1}, "extra"),
])
def test_refused_sections_name_the_field(change, words):
    with pytest.raises(RecipeError) as raised:
        parse_recipe(_recipe({"basis": "measured", "margins": MARGINS, **change}))
    assert words in str(raised.value)
    assert "Traceback" not in str(raised.value)

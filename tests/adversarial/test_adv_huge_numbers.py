"""Huge numbers: passes, repeats and timeouts outside sane bounds give one error line naming file:line:field."""

from __future__ import annotations

import pytest
import yaml
from advkit import invoke, one_error_line
from studykit import scripted_backend, write_study


def line_of(recipe, needle: str) -> int:
    return next(i for i, text in enumerate(recipe.read_text().splitlines(), 1) if needle in text)


@pytest.mark.parametrize("where,key,value,message", [
    ("protocol", "measured_passes", "1.0e+29", "Unable to parse input string as an integer, exceeded maximum size"),
    ("protocol", "measured_passes", "1.0e+9", "Input should be less than or equal to 1000"),
    ("protocol", "feasibility_passes", "100000", "Input should be less than or equal to 1000"),
    ("workload", "repeat", "1.0e+11", "Input should be less than or equal to 10000"),
    ("protocol", "request_timeout_s", ".inf", "Input should be a finite number"),
    ("protocol", "ready_timeout_s", ".nan", "Input should be a finite number"),
    ("protocol", "stop_grace_s", "1.0e+29", "Input should be less than or equal to 604800"),
])
def test_out_of_bounds_number(tmp_path, where, key, value, message):
    recipe = write_study(tmp_path, [scripted_backend("a")])
    data = yaml.safe_load(recipe.read_text())
    target = data["protocol"] if where == "protocol" else data["workloads"][0]
    target[key] = "@@VALUE@@"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False).replace("'@@VALUE@@'", value))
    line = one_error_line(invoke("plan", "--recipe", str(recipe), timeout=30))
    field = f"protocol.{key}" if where == "protocol" else f"workloads[0].{key}"
    assert line.startswith(f"error: Recipe is invalid: {recipe}:{line_of(recipe, key + ':')}: {field}: {message}"), line

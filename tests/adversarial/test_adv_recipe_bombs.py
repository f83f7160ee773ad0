"""Recipe bombs: aliases, bad dates, non-UTF-8 bytes and scans outside the root give one error line, fast."""

from __future__ import annotations

import time

import pytest
from advkit import invoke, one_error_line
from studykit import scripted_backend, write_study

BOMB = """format_version: 1
a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_alias_bomb_is_refused_at_its_first_alias(tmp_path):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(BOMB)
    started = time.monotonic()
    line = one_error_line(invoke("plan", "--recipe", str(recipe)))
    assert time.monotonic() - started < 30
    assert line == f"error: {recipe}:3: not valid YAML: YAML aliases (*name) are not allowed in this file."


def test_aliases_are_refused_in_claims_and_tolerances_files_too(tmp_path):
    tolerances = tmp_path / "tol.yaml"
    tolerances.write_text("format_version: 1\nx: &x 1.1\nmax_mean_ratio: *x\n")
    line = one_error_line(invoke("compare", "--baseline", str(tmp_path), "--candidate", str(tmp_path),
                                 "--tolerances", str(tolerances)))
    assert line.startswith(f"error: {tolerances}: not valid YAML (") and "aliases" in line


@pytest.fixture()
def recipe(tmp_path):
    return write_study(tmp_path, [scripted_backend("a")])


def test_invalid_date(recipe):
    recipe.write_text(recipe.read_text().replace("date: '2026-11-29'", "date: 2026-13-45"))
    assert "2026-13-45" in recipe.read_text()
    line = one_error_line(invoke("plan", "--recipe", str(recipe)))
    assert line == f"error: {recipe}:4: not a valid value: month must be in 1..12."


def test_non_utf8_recipe(recipe):
    recipe.write_bytes(recipe.read_bytes().replace(b"purpose: test", b"purpose: t\xe9st"))
    line = one_error_line(invoke("plan", "--recipe", str(recipe)))
    assert line.startswith(f"error: {recipe}: a recipe is UTF-8 text; byte ") and line.endswith(" is not.")


def test_scan_outside_the_root(recipe):
    recipe.write_text(recipe.read_text().replace("- requests\n", "- ../../../../../../etc\n", 1))
    line = one_error_line(invoke("verify-inputs", "--recipe", str(recipe)))
    assert line.startswith(f"error: Recipe is invalid: {recipe}:") and "inputs.scan: Value error, input paths are " \
        "relative to inputs.root and may not leave it" in line

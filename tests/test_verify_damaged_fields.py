"""verify over damaged fields: any value of a run's JSON files replaced by one of another kind gives
checks (a signed run: a FAIL) or UnsupportedFormat (no verdict), never an exception from inside a
check (issue 23 item 4).

verify catches only what damaged evidence raises (ReproError, ValueError, YAML and OS errors); a
KeyError, TypeError or AttributeError escaping here means a check reads a field without checking
its kind first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_kit import signed_run

from openjev_repro.audit.importer import import_evidence
from openjev_repro.audit.verify import verify_path
from openjev_repro.errors import UnsupportedFormat

pytestmark = pytest.mark.slow  # verifies every damaged field of whole runs: about 30 s of CPU

ARTIFACTS = Path(__file__).parent / "fixtures" / "system1" / "artifacts"
OTHER_KINDS = ([], {"k": [1]}, 7, "x", None)


def _paths(value, at=(), depth=3):
    """Every JSON path into `value`, `depth` levels at most, the first two items of each list."""
    yield at
    if depth == 0:
        return
    items = value.items() if isinstance(value, dict) else enumerate(value[:2]) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _paths(inner, (*at, key), depth - 1)


def _replaced(value, at, new):
    if not at:
        return new
    copy = json.loads(json.dumps(value))
    inner = copy
    for key in at[:-1]:
        inner = inner[key]
    inner[at[-1]] = new
    return copy


def _damage_each_field(run: Path, names: list[str], must_fail: bool, **verify_options) -> int:
    """Verify the run once per damaged field of each file (a .jsonl: its first line); returns the count.

    `must_fail`: every damage fails some check (a signed run; an imported run's files carry no digest)."""
    count = 0
    for name in names:
        path = run / name
        original = path.read_bytes()
        lines = original.decode("utf-8").splitlines()
        value = json.loads(lines[0] if name.endswith(".jsonl") else original)
        for at in list(_paths(value)):
            for other in OTHER_KINDS:
                damaged = _replaced(value, at, other)
                if damaged == value:
                    continue
                text = json.dumps(damaged)
                path.write_text("\n".join([text, *lines[1:]]) + "\n" if name.endswith(".jsonl") else text)
                try:
                    checks = verify_path(run, **verify_options)
                    assert not must_fail or any(c.passed is False for c in checks), (name, at, other)
                except UnsupportedFormat:
                    pass
                finally:
                    path.write_bytes(original)
                count += 1
    return count


def test_damaged_fields_of_a_signed_run_fail_their_checks(tmp_path):
    run, _, public = signed_run(tmp_path)
    names = ["state.json", "plan.json", "summary.json", "rows.jsonl", "responses/hf.jsonl"]
    assert _damage_each_field(run.path, names, True, pubkey=public) > 100


@pytest.mark.parametrize("name", ["import.json", "responses/baseline.jsonl"])
def test_damaged_fields_of_an_imported_run_fail_their_checks(tmp_path, name):
    import_evidence(ARTIFACTS, tmp_path / "run")
    assert _damage_each_field(tmp_path / "run", [name], False, source=ARTIFACTS) > 20

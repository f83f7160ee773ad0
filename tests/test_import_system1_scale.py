"""The system1-omni importer at scale, on synthetic sources of any size (system1_synth.py).

Two properties the speed work must keep: the cost is linear in the rows (no quadratic path,
such as a duplicate check by `list.count`), and msgspec's fast path converts every row exactly
as the standard library path does (same files, byte for byte). The speed target itself is met
in a benchmark, not here: `python tests/bench_import_system1.py --rows 96000`.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import msgspec
import pytest
from system1_synth import write_source

from openjev_repro.audit.importer import import_system1
from openjev_repro.audit.imports import arm_rows as importer
from openjev_repro.errors import EvidenceError
from openjev_repro.evidence.rows import read_rows

pytestmark = pytest.mark.slow  # imports 30,000 rows, and compares two sizes' times

ARTIFACTS = Path(__file__).parent / "fixtures" / "system1" / "artifacts"


def cpu_seconds_to_import(src: Path, out: Path) -> float:
    start = time.process_time()
    import_system1(src, out)
    return time.process_time() - start


def files_of(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != "state.json"}  # state.json holds the time of the import


def test_thirty_thousand_rows_cost_about_ten_times_three_thousand(tmp_path):
    # All rows in one file: there a per-row scan of the ids seen so far (list membership, count)
    # would cost 30,000 x 30,000 / 2 comparisons, several times the linear work: measured here,
    # such a scan made the ratio about 37, against about 10 without it.
    small = write_source(tmp_path / "small", 3_000, passes=1, arms=("baseline",))
    large = write_source(tmp_path / "large", 30_000, passes=1, arms=("baseline",))
    cpu_seconds_to_import(small, tmp_path / "warm")  # imports and caches out of the measurement
    small_cpu = min(cpu_seconds_to_import(small, tmp_path / f"small-{n}") for n in range(2))
    large_cpu = cpu_seconds_to_import(large, tmp_path / "large-run")
    assert len(read_rows(tmp_path / "large-run" / "rows.jsonl")) == 30_000
    assert large_cpu < 20 * small_cpu, f"30,000 rows took {large_cpu:.2f} s of CPU, 3,000 took {small_cpu:.2f} s"


class _RefusingDecoder:
    """Stands in for msgspec's decoder and refuses every line, so each row takes the json.loads path."""

    def decode(self, line: str) -> None:
        raise msgspec.ValidationError("refused by the test")


@pytest.mark.parametrize("source", ["synthetic", "fixture"])
def test_msgspec_path_writes_the_same_run_as_the_json_loads_path(tmp_path, monkeypatch, source):
    src = write_source(tmp_path / "src", 400) if source == "synthetic" else ARTIFACTS
    fast = import_system1(src, tmp_path / "fast")
    monkeypatch.setattr(importer, "_DECODE_ROW", _RefusingDecoder())
    reference = import_system1(src, tmp_path / "reference")
    assert files_of(tmp_path / "fast") == files_of(tmp_path / "reference")
    assert fast["converted"] == reference["converted"] and fast["rows"] == reference["rows"] > 0


def test_rows_file_is_byte_for_byte_what_row_to_json_writes(tmp_path):
    import_system1(write_source(tmp_path / "src", 400), tmp_path / "run")
    lines = (tmp_path / "run" / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    rows = read_rows(tmp_path / "run" / "rows.jsonl")
    assert lines == [row.to_json() for row in rows] and len(rows) == 400


def _rewrite_first_row(src: Path, change) -> None:
    path = src / "e2e" / "baseline-measured-1.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[0] = change(lines[0])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = json.loads((src / "manifest.json").read_text())
    data = path.read_bytes()
    manifest["files"]["e2e/baseline-measured-1.jsonl"].update(sha256=hashlib.sha256(data).hexdigest(),
                                                              bytes=len(data))
    (src / "manifest.json").write_text(json.dumps(manifest))


def test_a_row_msgspec_refuses_but_json_accepts_still_imports(tmp_path):
    # A lone surrogate in a field the import ignores: msgspec refuses the line, json.loads reads it.
    src = write_source(tmp_path / "src", 40)
    _rewrite_first_row(src, lambda line: line[:-1] + ', "note": "\\ud800"}')
    with pytest.raises(msgspec.DecodeError):
        importer._DECODE_ROW.decode((src / "e2e" / "baseline-measured-1.jsonl").read_text().splitlines()[0])
    report = import_system1(src, tmp_path / "run")
    assert report["rows"] == 40 and read_rows(tmp_path / "run" / "rows.jsonl")[0].id == "syn-case-000000"


@pytest.mark.parametrize("change, message", [
    # msgspec decodes these (types right): the value checks name them
    (lambda line: line.replace('"probability_yes": ', '"probability_yes": 1', 1), "is not a number in [0, 1]"),
    (lambda line: line.replace('"id": "syn-case-000000"', '"id": "  "'), "id '  ' is not a non-empty string"),
    (lambda line: line.replace('"predicted": "', '"predicted": "x', 1), "is not 'yes' or 'no'"),
    # msgspec refuses these (wrong type, NaN, too large for a float): json.loads and the checks name them
    (lambda line: line.replace('"probability_yes": ', '"probability_yes": "', 1).replace(
        ', "probability_delta"', '", "probability_delta"'), "is not a number in [0, 1]"),
    (lambda line: line.replace('"latency_s": ', '"latency_s": 1e400, "x": ', 1), "latency_s inf is not a finite"),
    (lambda line: line.replace('"probability_delta": 0,', '"probability_delta": NaN,'), "probability_delta nan"),
])
def test_errors_are_the_checks_messages_whichever_decoder_reads_the_row(tmp_path, change, message):
    src = write_source(tmp_path / "src", 40)
    _rewrite_first_row(src, change)
    with pytest.raises(EvidenceError, match=r"^e2e/baseline-measured-1\.jsonl:1: ") as caught:
        import_system1(src, tmp_path / "run")
    assert message in str(caught.value)
    assert not (tmp_path / "run").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_bodies_stay_the_standard_librarys_canonical_json(tmp_path):
    # body_sha256 is the digest of `raw` as json.dumps writes it sorted and compact: Python's float
    # spelling (1e-07, 1e+16), non-ASCII kept. A faster encoder that spells them otherwise would
    # change every imported body's digest.
    src = write_source(tmp_path / "src", 40)
    import_system1(src, tmp_path / "run")
    theirs = [json.loads(line) for line in (src / "e2e" / "baseline-measured-1.jsonl").read_text().splitlines()]
    ours = [json.loads(line) for line in (tmp_path / "run" / "responses" / "baseline.jsonl").read_text().splitlines()]
    rows = read_rows(tmp_path / "run" / "rows.jsonl")
    # theirs is baseline pass 1 only: the first lines of our baseline responses and of the run's rows
    for their, entry, row in zip(theirs, ours, rows, strict=False):
        body = json.dumps(their["raw"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert entry["body"] == body and row.body_sha256 == hashlib.sha256(body.encode()).hexdigest()
    assert '"queue_seconds":3e-07' in ours[1]["body"] and '"clock_ns":1e+16' in ours[1]["body"]

"""Rows of load levels (issue 29): the new fields are optional, sparse on disk and read back."""

from __future__ import annotations

import json

import pytest

from openjev_repro.errors import EvidenceError
from openjev_repro.evidence.rows import OPTIONAL_FIELDS, Row, RowWriter, read_rows
from openjev_repro.results.row_table import read_table

BASE = {"id": "c1", "backend": "b", "workload": "w", "phase": "measured", "pass_index": 1, "seq": 0, "start_ns": 1_000,
            "end_ns": 5_000, "status": 200, "body_sha256": "0" * 64, "probability": 0.9, "decision": "yes", "label": "yes",
            "input_tokens": 12, "error": None}


def test_a_row_without_load_fields_serializes_as_before():
    line = Row(**BASE).to_json()
    assert set(json.loads(line)) == set(BASE) | {"v", "reconnected"}
    for name in ("level", "scheduled_ns", "connection", "server_queue_ms"):
        assert name not in line and name in OPTIONAL_FIELDS


def test_an_open_loop_row_measures_from_its_schedule():
    row = Row(**BASE, level="open-r20", scheduled_ns=400, connection=3, server_queue_ms=1.25)
    assert row.latency_ns == 4_000 and row.from_schedule_ns == 4_600 and row.late_ns == 600
    closed = Row(**BASE, level="closed-c2", connection=1)
    assert closed.from_schedule_ns == closed.latency_ns and closed.late_ns is None


def test_load_rows_round_trip_through_both_readers(tmp_path):
    rows = [Row(**BASE), Row(**{**BASE, "seq": 1}, level="open-r20", scheduled_ns=900, connection=0,
                                 server_queue_ms=0.5)]
    path = tmp_path / "rows.jsonl"
    with RowWriter(path) as writer:
        for row in rows:
            writer.write(row)
    assert read_rows(path) == rows
    table = read_table(path)
    assert list(table.rows()) == rows
    assert table.level == [None, "open-r20"] and table.scheduled_ns == [None, 900]


def test_a_load_field_of_the_wrong_type_names_its_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(Row(**BASE).to_json() + "\n" + Row(**BASE, level="closed-c1", connection=0).to_json()
                    .replace('"connection": 0', '"connection": "zero"') + "\n")
    with pytest.raises(EvidenceError, match=":2:"):
        read_table(path)

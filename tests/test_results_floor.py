"""The hardware-floor section: per-request floors from measured figures, ratios, capture cost."""

from __future__ import annotations

import numpy as np
import pytest

from openjev_repro.evidence.records import BackendsRecord
from openjev_repro.evidence.rows import Row
from openjev_repro.results.floor import floor_lines, floor_ms, hardware_of
from openjev_repro.results.row_table import RowTable

P = 24_000_000_000
HARDWARE = {"gpu": "Test GPU", "matmul_bf16_tflops": 800.0, "copy_tbps": 4.0}


def _record(backends: dict) -> BackendsRecord:
    """backends.json's record of these backends' /health facts."""
    return BackendsRecord.from_json({"format_version": 1, "backends": backends})


def _row(backend: str, phase: str, pass_index: int, seq: int, start_ms: float, latency_ms: float,
         tokens: int) -> Row:
    start = int(start_ms * 1e6)
    return Row(id=f"c{seq}", backend=backend, workload="w", phase=phase, pass_index=pass_index, seq=seq,
               start_ns=start, end_ns=start + int(latency_ms * 1e6), status=200, body_sha256="0" * 64,
               probability=0.4, decision="no", label=None, input_tokens=tokens, error=None)


def test_floor_is_the_weight_read_or_the_matmuls_whichever_is_longer() -> None:
    floors = floor_ms(np.array([1, 100, 1000, 10_000]), P, 4.0, 800.0)
    read = 2 * P / 4e12 * 1e3                      # 12 ms to read 48 GB once at 4 TB/s
    assert floors[0] == pytest.approx(read) and floors[1] == pytest.approx(read)
    assert floors[2] == pytest.approx(2 * P * 1000 / 800e12 * 1e3)   # 60 ms of matmuls
    assert floors[3] == pytest.approx(600.0)


def test_no_backend_measured_means_no_section() -> None:
    table = RowTable.from_rows([_row("a", "measured", 1, 0, 0, 10, 100)])
    absent = {"available": False, "reason": "not in the backend's /health"}
    assert floor_lines(_record({"a": {"hardware": absent, "non_embedding_parameters": absent}}), table) == []
    assert hardware_of(_record({"a": {"hardware": {**HARDWARE, "copy_tbps": 0}, "non_embedding_parameters": P}})) is None
    assert hardware_of(_record({"a": {"hardware": HARDWARE, "non_embedding_parameters": P}}))[1:] == (
        BackendsRecord.from_json({"backends": {"a": {"hardware": HARDWARE}}}).backends["a"].hardware, P)


def test_ratios_and_capture_cost_per_new_length() -> None:
    rows = []
    # graph backend: first sight of each length costs 500 ms more (capture), measured 24 ms at 100 tokens
    rows += [_row("g", "feasibility", 1, i, i * 1000, 524 if i < 2 else 24, 100 + i % 2) for i in range(4)]
    rows += [_row("g", "measured", 1, i, 10_000 + i * 100, 24, 100 + i % 2) for i in range(4)]
    rows += [_row("e", "measured", 1, i, 20_000 + i * 100, 120, 1000) for i in range(4)]
    backends = {"g": {"hardware": HARDWARE, "non_embedding_parameters": P, "cuda_graphs": {"capacity": 64}},
                "e": {"cuda_graphs": None}}
    lines = floor_lines(_record(backends), RowTable.from_rows(rows))
    text = "\n".join(lines)
    assert "Measured by g on Test GPU" in text and "800.0 TFLOP/s" in text and "4.000 TB/s" in text
    g = next(line for line in lines if line.startswith("| g |"))
    e = next(line for line in lines if line.startswith("| e |"))
    assert g.split(" | ")[1:5] == ["4", "24.00", "12.00", "2.00×"]       # 24 ms over a 12 ms floor
    assert e.split(" | ")[1:5] == ["4", "120.00", "60.00", "2.00×"]      # 1000 tokens: matmul-bound
    assert g.rstrip(" |").endswith("24.00 | 12.00 | 2.00×")               # every g request is 100-101 tokens
    assert e.rstrip(" |").endswith("— | — | —")                          # no 80-110-token request
    assert "- g: capture cost per new length 500.0 ms median over 2 lengths (max 500.0 ms)" in lines
    assert not any(line.startswith("- e:") for line in lines)

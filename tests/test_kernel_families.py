"""kernel-families.json from Kineto traces shaped like the H200's (a CUDA trace cannot be made on this
CPU host, so the traces here are written by the test, with kernel names of PyTorch's and our Triton
kernels), the trace gates' arithmetic, and hostile trace files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from openjev_repro.errors import EvidenceError
from openjev_repro.evidence.kernel_families import TraceEntry, TracesRecord, compute_kernel_families
from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.evidence.trace_recipe import GraphReplayGate, KernelTimeReductionGate

REPO = Path(__file__).resolve().parents[1]
FAMILIES = load_recipe(REPO / "recipes" / "h200-packed-silu-27b-shape.yaml").traces.families  # type: ignore[union-attr]
SILU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, ...)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, ...)")
MUL_FLOAT = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
             "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, ...)")
GEMM = "nvjet_sm90_tst_256x136_64x4_2x1_v_bz_coopA_TNT"
GRAPHS = {"capacity": 64, "retained": 57, "captures": 57, "replays": 300, "evictions": 0}


def _kernel(name: str, dur: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 1.0, "dur": dur,
            "args": {"correlation": 9, "grid": [1, 1, 1]}}


def _call(name: str, cat: str = "cuda_runtime") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 0.5, "dur": 3.0}


def _write(run: Path, name: str, events: list[dict], *, device: str = "cuda:0", after: dict | None = None) -> str:
    meta = {"format_version": 1, "name": name, "profiler": "torch.profiler", "torch": "2.11.0+cu130", "device": device,
            "activities": ["CPU", "CUDA"], "input_tokens": [3399], "graphs_before": GRAPHS,
            "graphs_after": after or GRAPHS}
    (run / "traces").mkdir(exist_ok=True)
    path = run / "traces" / f"{name}.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events, "openjev": meta, "schemaVersion": 1}).encode()))
    return f"traces/{name}.pt.trace.json.gz"


def _record(*entries: tuple[str, int, int, str]) -> TracesRecord:
    return TracesRecord(format_version=2, profiler="torch", header="X-OpenJev-Trace", entries=[
        TraceEntry(backend=b, tokens=t, repeat=r, case_id="c", status="done", file=f) for b, t, r, f in entries])


def test_families_launches_and_captures_of_a_graph_replay(tmp_path):
    library = [_kernel(SILU, 60.0), _kernel(MUL, 90.0), _kernel(MUL_FLOAT, 10.0), _kernel(GEMM, 500.0),
               _kernel("conv_silu_kernel", 20.0), _kernel("gated_norm_kernel", 5.0)]
    fused = [_kernel("silu_mul_kernel", 95.0), _kernel(MUL_FLOAT, 10.0), _kernel(GEMM, 500.0),
             _kernel("conv_silu_kernel", 20.0), _kernel("gated_norm_kernel", 5.0)]
    calls = [_call("cudaMemcpyAsync"), _call("cudaGraphLaunch"), _call("cudaStreamSynchronize")]
    a = _write(tmp_path, "lib-3399tok-1", library + calls)
    b = _write(tmp_path, "fp32-3399tok-1", fused + calls)
    table = compute_kernel_families(tmp_path, _record(("lib", 3399, 1, a), ("fp32", 3399, 1, b)), FAMILIES)
    lib, fp32 = table.traces
    assert (lib.kernels, lib.graph_launches, lib.kernel_launches, lib.captures) == (6, 1, 0, 0)
    assert lib.families["mlp-gate"].kernels == 2 and lib.families["mlp-gate"].time_us == 150.0
    assert lib.families["silu"].kernels == 1 and lib.families["mul-bf16"].time_us == 90.0  # not the FP32 multiply
    assert fp32.families["mlp-gate"].kernels == 1 and fp32.families["mlp-gate"].time_us == 95.0
    assert lib.families["gemm"].time_us == 500.0 and lib.families["conv"].kernels == 1
    assert lib.time_us == 685.0
    gate = KernelTimeReductionGate(name="g", kind="kernel_time_reduction", family="mlp-gate", baseline="lib",
                                   candidate="fp32", tokens=3399, min_percent=25.0)
    _, passed, detail = gate.decide(table)
    assert passed is True and "fp32 0.095 ms is 36.67% below lib 0.150 ms" in detail
    strict = gate.model_copy(update={"min_percent": 40.0})
    assert strict.decide(table)[1] is False
    assert GraphReplayGate(name="r", kind="graph_replay", backend="lib").decide(table)[1] is True


def test_a_recapture_or_a_kernel_launch_fails_graph_replay(tmp_path):
    launched = _write(tmp_path, "a-107tok-1", [_kernel(GEMM, 5.0), _call("cudaGraphLaunch"),
                                               _call("cuLaunchKernel", "cuda_driver"), _call("cudaLaunchKernelExC_v11060")])
    recaptured = _write(tmp_path, "a-107tok-2", [_kernel(GEMM, 5.0), _call("cudaGraphLaunch")],
                        after={**GRAPHS, "captures": 58})
    table = compute_kernel_families(tmp_path, _record(("a", 107, 1, launched), ("a", 107, 2, recaptured)), FAMILIES)
    assert [(t.kernel_launches, t.captures) for t in table.traces] == [(2, 0), (0, 1)]
    _, passed, detail = GraphReplayGate(name="r", kind="graph_replay", backend="a").decide(table)
    assert passed is False
    assert "0 of 2 traces" in detail and "107 tok #1: 1 graph launches, 2 kernel launches, 0 captures" in detail
    assert "107 tok #2: 1 graph launches, 0 kernel launches, 1 captures" in detail


def test_the_figures_are_reproducible_to_the_bit(tmp_path):
    events = [_kernel(SILU, d) for d in (0.1, 0.2, 0.3, 1e-3, 123.456)]
    file = _write(tmp_path, "x-107tok-1", events)
    first = compute_kernel_families(tmp_path, _record(("x", 107, 1, file)), FAMILIES).to_json()
    again = compute_kernel_families(tmp_path, _record(("x", 107, 1, file)), FAMILIES).to_json()
    assert first == again and first["traces"][0]["families"]["silu"]["time_us"] == 124.057


@pytest.mark.parametrize(("content", "message"), [
    (b"not gzip at all", "is not a gzip file"),
    (gzip.compress(b"[1, 2]", mtime=0), "Expected `object`, got `array`"),
    (gzip.compress(b"{\"traceEvents\": ", mtime=0), "is not JSON of the expected shape"),
    (gzip.compress(b'{"traceEvents": "no"}', mtime=0), "Expected `array`"),
    (gzip.compress(b'{"traceEvents": []}', mtime=0), "no `openjev` key"),
    (gzip.compress(b'{"traceEvents": [], "openjev": {"format_version": 1, "name": "x\\nq"}}', mtime=0), "Object missing required field"),
])
def test_hostile_trace_files_are_one_line_errors(tmp_path, content, message):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces/x-1tok-1.pt.trace.json.gz").write_bytes(content)
    with pytest.raises(EvidenceError, match=message) as caught:
        compute_kernel_families(tmp_path, _record(("x", 1, 1, "traces/x-1tok-1.pt.trace.json.gz")), FAMILIES)
    assert "\n" not in str(caught.value).strip()


def test_a_negative_kernel_duration_is_refused_but_other_events_may_hold_anything(tmp_path):
    fine = _write(tmp_path, "a-1tok-1", [_kernel(GEMM, 5.0), {"ph": "i", "cat": "python_function", "name": "x", "dur": -1}])
    assert compute_kernel_families(tmp_path, _record(("a", 1, 1, fine)), FAMILIES).traces[0].kernels == 1
    bad = _write(tmp_path, "a-1tok-2", [_kernel(GEMM, -5.0)])
    with pytest.raises(EvidenceError, match="lasts -5.0 µs"):
        compute_kernel_families(tmp_path, _record(("a", 1, 2, bad)), FAMILIES)


def test_a_decompression_bomb_is_refused(tmp_path, monkeypatch):
    import openjev_repro.evidence.kernel_families as module

    monkeypatch.setattr(module, "MAX_TRACE_BYTES", 1000)
    big = _write(tmp_path, "a-1tok-1", [_kernel(GEMM, 1.0)] * 50)
    with pytest.raises(EvidenceError, match="decompresses to more than 1000 bytes"):
        compute_kernel_families(tmp_path, _record(("a", 1, 1, big)), FAMILIES)


def test_a_done_entry_names_a_trace_file_inside_traces():
    for file in ("../etc/passwd", "traces/../x.pt.trace.json.gz", "traces/a/b.pt.trace.json.gz", None):
        with pytest.raises(Exception, match="traces/<name>.pt.trace.json.gz"):
            TraceEntry(backend="a", tokens=1, repeat=1, case_id="c", status="done", file=file)

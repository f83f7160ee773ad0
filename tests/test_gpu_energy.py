"""GPU state and energy per decision in the evidence. No NVIDIA driver runs here: the GPU is the
FakeGpus test double (its total-energy counter advances in 20 ms steps, as NVML's does on an H200);
the study, its backend processes, summary.json and `verify` are real."""

import json

import pytest
from fake_gpus import FakeGpus
from studykit import scripted_backend, write_study

from openjev_repro.audit.verify import verify_dir
from openjev_repro.errors import EvidenceError, UnsupportedFormat
from openjev_repro.orchestrator.runner import StudyOptions, run_study
from openjev_repro.results.energy import energy_and_state, read_gpu_events


def _controls(gpu, idle_s=0.2, gates=None):
    return {"controls": {"gpu": {"index": gpu.index, "uuid": gpu.uuid}, "memory_sample_period_ms": 20,
                         "idle_window_s": idle_s}}


def _run(tmp_path, monkeypatch, gpus, gates=None, **state):
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpu = gpus.gpus()[0]
    if state is not None:
        gpus.enable_state(gpu.uuid, **state)
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3, extra=_controls(gpu), gates=gates)
    return run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus))


def test_a_gpu_less_run_says_energy_and_gpu_state_are_unavailable_and_why(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    summary = json.loads(run.file("summary.json").read_text())
    for key in ("energy", "gpu_state"):
        assert summary[key]["available"] is False
        assert "controls no GPU" in summary[key]["reason"]
    assert "Energy and GPU state unavailable: the recipe controls no GPU" in run.file("report.md").read_text()
    assert all(c.passed is not False for c in verify_dir(run.path, allow_unsigned=True))


def test_with_the_driver_double_summary_holds_joules_per_decision_that_verify_recomputes(tmp_path, monkeypatch):
    gpus = FakeGpus.h200(1)
    run = _run(tmp_path, monkeypatch, gpus, power_w=500.0, sm_clock_mhz=1980, reasons=0x4)
    summary = json.loads(run.file("summary.json").read_text())
    energy = summary["energy"]
    assert energy["available"] is True and energy["method"].startswith("NVML total-energy counter")
    one = energy["workloads"]["mixed"]["one"]
    assert [p["label"] for p in one["passes"]] == ["one/mixed/measured-1", "one/mixed/measured-2"]
    for p in one["passes"]:
        assert p["requests"] == 3 and p["method"] == "counter"
        # 500 W over the pass's duration, within one 20 ms counter step at each end
        assert p["joules"] == pytest.approx(500 * p["seconds"], abs=500 * 0.041)
        assert p["joules_per_decision"] == pytest.approx(p["joules"] / 3, abs=1e-6)
    assert one["joules_per_decision"] == pytest.approx(sum(p["joules"] for p in one["passes"]) / 6, abs=1e-5)
    assert one["idle_power_w"] == pytest.approx(500, rel=0.25)  # the double's power is constant
    assert energy["counter"]["smallest_step_mj"] >= 10_000  # 20 ms x 500 W
    state = summary["gpu_state"]
    assert {p["label"] for p in state["passes"]} >= {"one/mixed/measured-1", "one/mixed/measured-2"}
    assert all(p["clock_event_reasons"] == ["sw_power_cap"] and not p["slowdown"] for p in state["passes"])
    host = json.loads(run.file("host.json").read_text())
    assert host["device"]["state_at_start"]["sm_clock_mhz"] == 1980
    assert json.loads(run.file("logs/one.health-after.json").read_text())["status"] == "ready"  # read after the passes
    report = run.file("report.md").read_text()
    assert "## GPU state and energy" in report and "J / decision" in report
    checks = verify_dir(run.path, allow_unsigned=True)
    assert all(c.passed is not False for c in checks), [c for c in checks if c.passed is False]
    recomputed = next(c for c in checks if c.name == "statistics recomputed")
    assert recomputed.passed is True


def test_verify_fails_when_the_energy_readings_were_changed(tmp_path, monkeypatch):
    gpus = FakeGpus.h200(1)
    run = _run(tmp_path, monkeypatch, gpus, power_w=300.0)
    path = run.file("gpu.jsonl")
    lines = path.read_text().splitlines()
    changed = [json.loads(line) for line in lines]
    end = next(e for e in changed if e["kind"] == "end" and e["label"].endswith("measured-1"))
    end["energy_mj"] += 5000
    path.write_text("".join(json.dumps(e) + "\n" for e in changed))
    checks = {c.name: c for c in verify_dir(run.path, allow_unsigned=True)}
    assert checks["statistics recomputed"].passed is False
    assert "energy" in checks["statistics recomputed"].detail


def test_without_the_counter_sampled_power_is_integrated_and_said_so(tmp_path, monkeypatch):
    gpus = FakeGpus.h200(1)
    run = _run(tmp_path, monkeypatch, gpus, power_w=200.0, energy_counter=False)
    energy = json.loads(run.file("summary.json").read_text())["energy"]
    assert energy["method"].startswith("no energy counter: sampled power integrated")
    p = energy["workloads"]["mixed"]["one"]["passes"][0]
    assert p["method"] == "integrated" and p["joules"] == pytest.approx(200 * p["seconds"], abs=1e-3)


def _gate(backend=None):
    return [{"name": "not-throttled", "kind": "gpu_not_throttled", **({"backend": backend} if backend else {})}]


def test_gate_gpu_not_throttled_fails_on_a_thermal_slowdown_and_passes_on_a_power_cap(tmp_path, monkeypatch):
    gpus = FakeGpus.h200(1)
    run = _run(tmp_path / "a", monkeypatch, gpus, gates=_gate(), power_w=600.0, reasons=0x4)
    gate = json.loads(run.file("summary.json").read_text())["gates"][0]
    assert gate["passed"] is True and "no thermal or hardware slowdown" in gate["detail"]
    gpus = FakeGpus.h200(1)
    run = _run(tmp_path / "b", monkeypatch, gpus, gates=_gate("one"), power_w=600.0, reasons=0x4 | 0x40)
    gate = json.loads(run.file("summary.json").read_text())["gates"][0]
    assert gate["passed"] is False and "hw_thermal_slowdown" in gate["detail"]


def test_gate_gpu_not_throttled_without_gpu_state_does_not_pass(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=2, gates=_gate())
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    gate = json.loads(run.file("summary.json").read_text())["gates"][0]
    assert gate["passed"] is False and "no GPU state to judge" in gate["detail"]


@pytest.mark.parametrize("line", ['{"kind": "sample", "t_ns": NaN}', '{"kind": "sample", "t_ns": 1e400}',
                                  '{"kind": "sample", "power_w": "hot"}', '[1, 2]', 'not json',
                                  '{"kind": "sample", "t_ns": true}', '{"kind": "begin", "label": 7}'])
def test_hostile_gpu_state_lines_are_one_evidence_error(tmp_path, line):
    path = tmp_path / "gpu.jsonl"
    path.write_text('{"format_version": 1, "kind": "header", "available": true}\n' + line + "\n")
    with pytest.raises(EvidenceError, match="gpu.jsonl line 2"):
        read_gpu_events(path)


def test_gpu_state_header_of_another_format_version_is_unsupported(tmp_path):
    path = tmp_path / "gpu.jsonl"
    path.write_text('{"format_version": 2, "kind": "header", "available": true}\n')
    with pytest.raises(UnsupportedFormat, match="gpu.jsonl header: format_version 2 is not a format this tool reads"):
        read_gpu_events(path)


def test_energy_above_idle_subtracts_the_idle_windows_power(tmp_path):
    header = {"kind": "header", "available": True, "format_version": 1}
    events = [header,
              {"kind": "idle_begin", "label": "b", "t_ns": 0, "energy_mj": 0, "power_w": 100.0},
              {"kind": "idle_end", "label": "b", "t_ns": 2_000_000_000, "energy_mj": 200_000, "power_w": 100.0},
              {"kind": "begin", "label": "b/w/measured-1", "t_ns": 3_000_000_000, "energy_mj": 300_000},
              {"kind": "end", "label": "b/w/measured-1", "t_ns": 4_000_000_000, "energy_mj": 900_000}]
    path = tmp_path / "gpu.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    energy, _ = energy_and_state(read_gpu_events(path), {"b/w/measured-1": 4}, ["b"])
    b = energy.to_json()["workloads"]["w"]["b"]
    assert b["idle_power_w"] == 100.0
    assert b["joules_per_decision"] == 150.0  # 600 J / 4
    assert b["above_idle_joules_per_decision"] == 125.0  # (600 J - 100 W x 1 s) / 4

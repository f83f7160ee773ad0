"""The runner with GPU controls. No NVIDIA driver can run here, so the GPU is the FakeGpus test
double; the reservation lock, the processes and (when installed) numactl are real."""

import json
import shutil

import pytest

from openjev_repro.errors import RunIncomplete
from openjev_repro.host import FakeGpus
from openjev_repro.study import StudyOptions, run_study

from studykit import scripted_backend, write_study


def _controls(gpu, numa=False):
    controls = {"gpu": {"index": gpu.index, "uuid": gpu.uuid},
                "reservation": {"wait": "1s", "timeout": "10m", "note": "test-study"},
                "memory_sample_period_ms": 20}
    if numa:
        controls.update(numa_node=0, cpus="0")
    return {"controls": controls}


def test_controlled_study_records_device_reservation_memory_and_cleanup(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    gpu = gpus.gpus()[2]
    numa = shutil.which("numactl") is not None
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3, extra=_controls(gpu, numa))
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_backend=gpus))
    host = json.loads(run.file("host.json").read_text())
    assert host["controlled"] and host["device"]["uuid"] == gpu.uuid
    assert host["reservation"]["note"] == "test-study"
    assert host["cleanup"]["passed"] is True
    assert any("measured-2" in json.dumps(p) for p in host["memory"]["passes"])
    assert run.file("memory.jsonl").is_file()
    if numa:
        binding = host["binding"]["effective"]["one"]
        assert binding["cpus_allowed_list"] == "0" and binding["memory_policy"] == "bind:0"


def test_wrong_uuid_refuses_before_any_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    gpu = gpus.gpus()[2]
    wrong = type(gpu)(**{**gpu.__dict__, "uuid": "GPU-00000000-0000-0000-0000-000000000000"})
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3, extra=_controls(wrong))
    with pytest.raises(RunIncomplete, match="GPU-00000000"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_backend=gpus))
    (run,) = list((tmp_path / "runs").iterdir())
    assert not (run / "processes.json").exists()


def test_busy_gpu_refuses_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    gpu = gpus.gpus()[2]
    gpus.add_process(gpu.uuid, 4242, "someone-else", 1000)
    recipe = write_study(tmp_path, [scripted_backend("one")], n=2, extra=_controls(gpu))
    with pytest.raises(RunIncomplete, match="4242"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_backend=gpus))
    gpus.set_memory(gpu.uuid, 1000)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_backend=gpus, allow_busy=True))
    host = json.loads(run.file("host.json").read_text())
    assert host["device"]["allow_busy"] is True

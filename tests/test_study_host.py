"""The runner with GPU controls. No NVIDIA driver can run here, so the GPU is the FakeGpus test
double; the reservation lock, the processes and (when installed) numactl are real."""

import json
import shutil

import pytest
from fake_gpus import FakeGpus
from invoking import invoke
from studykit import scripted_backend, write_study

from openjev_repro.errors import RunIncomplete
from openjev_repro.orchestrator.runner import StudyOptions, run_study


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
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus))
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
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus))
    (run,) = list((tmp_path / "runs").iterdir())
    assert not (run / "processes.json").exists()


def test_busy_gpu_refuses_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    gpu = gpus.gpus()[2]
    gpus.add_process(gpu.uuid, 4242, "someone-else", 1000)
    recipe = write_study(tmp_path, [scripted_backend("one")], n=2, extra=_controls(gpu))
    with pytest.raises(RunIncomplete, match="4242"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus))
    gpus.set_memory(gpu.uuid, 1000)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus, allow_busy=True))
    host = json.loads(run.file("host.json").read_text())
    assert host["device"]["allow_busy"] is True


# --- run-time GPU override: the committed recipe, another GPU -------------------------------

SCRIPTED_SHOWING_GPU = ("import os, runpy, sys; print('CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '-'),"
                        " flush=True); script = sys.argv[1]; sys.argv = [script, '--port', sys.argv[2]];"
                        " runpy.run_path(script, run_name='__main__')")


def _backend_showing_gpu(name):
    backend = scripted_backend(name)
    backend["command"] = ["{python}", "-c", SCRIPTED_SHOWING_GPU, backend["command"][1], "{port}"]
    return backend


@pytest.mark.parametrize("index, source, index_from", [(None, "cli", "uuid lookup"), (1, "slurm", "override")])
def test_gpu_override_runs_the_unchanged_recipe_on_another_gpu_and_records_both(tmp_path, monkeypatch, index, source,
                                                                                index_from):
    from openjev_repro.host.override import GpuOverride

    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    pinned, other = gpus.gpus()[2], gpus.gpus()[1]
    recipe = write_study(tmp_path, [_backend_showing_gpu("one")], n=3, extra=_controls(pinned))
    override = GpuOverride(uuid=other.uuid, index=index, source=source)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus,
                                 gpu_override=override))
    assert run.state_record().status == "complete"
    assert run.file("recipe.yaml").read_bytes() == recipe.read_bytes()   # the recipe is not edited
    host = json.loads(run.file("host.json").read_text())
    assert host["device"]["uuid"] == other.uuid and host["device"]["index"] == 1
    assert other.uuid in json.dumps(host["reservation"]) and pinned.uuid not in json.dumps(host["reservation"])
    assert host["gpu_override"] == {"recipe": {"index": 2, "uuid": pinned.uuid},
                                    "run_time": {"index": 1, "uuid": other.uuid, "index_from": index_from},
                                    "source": source}
    declared = {"recipe": {"index": 2, "uuid": pinned.uuid}, "run_time": {"index": index, "uuid": other.uuid},
                "source": source}
    assert json.loads(run.file("plan.json").read_text())["gpu_override"] == declared
    assert json.loads(run.file("environment.json").read_text())["gpu_override"] == declared
    assert f"CUDA_VISIBLE_DEVICES={other.uuid}" in run.file("logs/one.log").read_text()
    report = run.file("report.md").read_text()
    assert f"GPU override ({source}): ran on index 1 `{other.uuid}`; the recipe pins index 2 `{pinned.uuid}`" in report


def test_without_override_the_backend_sees_the_recipes_gpu_and_no_override_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    pinned = gpus.gpus()[2]
    recipe = write_study(tmp_path, [_backend_showing_gpu("one")], n=3, extra=_controls(pinned))
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus))
    assert "gpu_override" not in json.loads(run.file("host.json").read_text())
    assert "gpu_override" not in json.loads(run.file("plan.json").read_text())
    assert f"CUDA_VISIBLE_DEVICES={pinned.uuid}" in run.file("logs/one.log").read_text()
    assert "GPU override" not in run.file("report.md").read_text()


def test_gpu_override_to_a_uuid_this_host_lacks_refuses_before_any_backend(tmp_path, monkeypatch):
    from openjev_repro.host.override import GpuOverride

    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(tmp_path / "locks"))
    gpus = FakeGpus.h200(4)
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3, extra=_controls(gpus.gpus()[2]))
    missing = GpuOverride(uuid="GPU-99999999-0000-0000-0000-000000000000")
    with pytest.raises(RunIncomplete, match="no GPU on this host has UUID GPU-99999999"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", gpu_driver=gpus, gpu_override=missing))
    (run,) = list((tmp_path / "runs").iterdir())
    assert not (run / "processes.json").exists()
    assert json.loads((run / "state.json").read_text())["status"] == "incomplete"


@pytest.mark.parametrize("args, message", [
    (["--gpu-index", "1"], "error: --gpu-index needs --gpu-uuid"),
    (["--gpu-uuid", "GPU-nonsense"], "error: GPU override: 'GPU-nonsense' is not a GPU UUID"),
    (["--gpu-uuid", "GPU-00000000-0000-0000-0000-000000000000", "--gpu-index", "x"],
     "error: --gpu-index must be a whole number"),
])
def test_study_cli_refuses_a_bad_override_in_one_line(tmp_path, args, message):

    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    result = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), *args, timeout=None)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "runs").exists()

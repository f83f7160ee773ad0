"""`invoke gpus` and `invoke reserve`, run as real commands in subprocesses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.host import NoDriver, detect_driver, holder_of
from openjev_repro.host.process import pid_exited

ROOT = Path(__file__).resolve().parents[1]
INVOKE = str(Path(sys.executable).with_name("invoke"))
GPU = "GPU-cbf66259-f4ab-0ede-1811-82037dde5924"


def invoke(*args, lock_dir=None, timeout=60):
    env = {**os.environ, "OPENJEV_LOCK_DIR": str(lock_dir)} if lock_dir else None
    return subprocess.run([INVOKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def _driver_present() -> bool:
    try:
        detect_driver().close()
        return True
    except NoDriver:
        return False


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present on this host")
def test_gpus_without_a_driver_says_so_and_exits_cleanly():
    done = invoke("gpus")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No NVIDIA driver was found on this host:")
    assert "Traceback" not in done.stderr
    as_json = invoke("gpus", "--json")
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["gpus"] == [] and answer["driver"] is None
    assert answer["no_driver"].startswith("No NVIDIA driver was found on this host:")


def test_json_tasks_answer_errors_in_json():
    done = invoke("plan", "--json", "--recipe", "no-such-recipe.yaml")
    assert done.returncode == 1 and done.stderr == ""
    assert json.loads(done.stdout) == {"error": "No recipe at no-such-recipe.yaml."}
    missing = invoke("plan", "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"].startswith("--recipe is required")


def test_reserve_runs_the_command_with_its_words_intact(tmp_path):
    out = tmp_path / "args.json"
    record = tmp_path / "record.json"
    script = f"import json, os, sys; json.dump([sys.argv[1:], os.environ['CUDA_VISIBLE_DEVICES']], open({str(out)!r}, 'w'))"
    done = invoke("reserve", "--gpu-ids", GPU, "--note", "cli test", "--record", str(record),
                  "--", sys.executable, "-c", script, "a  b", "--flag", lock_dir=tmp_path / "locks")
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == [["a  b", "--flag"], GPU]
    saved = json.loads(record.read_text())
    assert saved["reservation"]["uuids"] == [GPU] and saved["reservation"]["note"] == "cli test"
    assert saved["command"]["exit_status"] == 0 and saved["command"]["timed_out"] is False
    assert holder_of(GPU, tmp_path / "locks") is None  # released


def test_reserve_passes_the_exit_status_through(tmp_path):
    done = invoke("reserve", "--gpu-ids", GPU, "--", "sh", "-c", "exit 7", lock_dir=tmp_path)
    assert done.returncode == 7


def test_reserve_kills_a_command_that_outlives_its_timeout(tmp_path):
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    done = invoke("reserve", "--gpu-ids", GPU, "--timeout", "1s", "--grace", "0.5s",
                  "--", sys.executable, "-c", ignore, lock_dir=tmp_path)
    assert done.returncode == 124
    assert "ran past --timeout 1s and its process group was killed with SIGKILL" in done.stderr


def test_reserve_of_a_held_gpu_times_out_with_the_holders_note(tmp_path):
    holder = subprocess.Popen(
        [INVOKE, "reserve", "--gpu-ids", GPU, "--note", "native graph-64", "--",
         sys.executable, "-c", "import sys; print('go', flush=True); sys.stdin.read()"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "OPENJEV_LOCK_DIR": str(tmp_path)},
    )
    try:
        assert holder.stdout.readline().strip() == "go"
        done = invoke("reserve", "--gpu-ids", GPU, "--wait", "500ms", "--", "true", lock_dir=tmp_path)
        assert done.returncode == 1
        assert done.stderr.startswith(f"error: GPU {GPU} is reserved by pid {holder.pid}")
        assert "note 'native graph-64'" in done.stderr and "not released within 0.5 s" in done.stderr
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert holder.returncode == 0


def test_terminating_reserve_stops_its_command_before_releasing(tmp_path):
    pidfile = tmp_path / "cmd.pid"
    script = f"import os, sys, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); print('go', flush=True); time.sleep(60)"
    proc = subprocess.Popen([INVOKE, "reserve", "--gpu-ids", GPU, "--grace", "2s", "--", sys.executable, "-c", script],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "OPENJEV_LOCK_DIR": str(tmp_path)})
    try:
        assert proc.stdout.readline().strip() == "go"
        assert holder_of(GPU, tmp_path).pid == proc.pid
        proc.terminate()
        assert proc.wait(30) == 128 + 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert pid_exited(int(pidfile.read_text()))  # the command did not outlive its reservation
    assert holder_of(GPU, tmp_path) is None


@pytest.mark.parametrize("args,message", [
    (["--gpu-ids", GPU], "No command to run: put it after `--`"),
    (["--gpu-ids", GPU, "--wait", "soon", "--", "true"], "--wait: 'soon' is not a duration"),
    (["--gpu-ids", "999", "--", "true"], None),
])
def test_reserve_bad_input(tmp_path, args, message):
    done = invoke("reserve", *args, lock_dir=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    if message:
        assert message in done.stderr
    else:  # an index needs the driver to find its UUID
        expected = "No GPU index 999 on this host" if _driver_present() else "No NVIDIA driver was found"
        assert expected in done.stderr

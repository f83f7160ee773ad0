"""Reservation locks, for real: flock on files in a temporary lock directory, real contending processes."""

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from openjev_repro.errors import HostError, ReservationTimeout
from openjev_repro.host import holder_of, lock_dir, reserve_gpus

GPU_A = "GPU-cbf66259-f4ab-0ede-1811-82037dde5924"
GPU_B = "GPU-00000001-0000-0000-0000-000000000000"

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from openjev_repro.host import reserve_gpus
    with reserve_gpus(sys.argv[2].split(","), wait_s=float(sys.argv[4]), note=sys.argv[3], directory=Path(sys.argv[1])) as r:
        print("held", r.waited_s, flush=True)
        sys.stdin.read()  # hold until the test closes our stdin (or kills us)
""")


def start_holder(directory, uuids, note, wait_s=0.0):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), ",".join(uuids), note, str(wait_s)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc


def wait_held(proc):
    line = proc.stdout.readline()
    assert line.startswith("held"), f"holder did not take the lock (exit {proc.poll()})"
    return float(line.split()[1])


@pytest.fixture
def holder(tmp_path):
    procs = []

    def make(uuids, note, wait_s=0.0):
        proc = start_holder(tmp_path, uuids, note, wait_s)
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_held_gpu_times_out_naming_the_holder_and_its_note(tmp_path, holder):
    other = holder([GPU_A], "hf-mixed-run")
    wait_held(other)
    started = time.monotonic()
    with pytest.raises(ReservationTimeout) as info, reserve_gpus([GPU_A], wait_s=0.6, note="mine", directory=tmp_path):
        pytest.fail("took a lock another process holds")
    assert time.monotonic() - started >= 0.6  # it waited before giving up
    message = str(info.value)
    assert f"GPU {GPU_A} is reserved by pid {other.pid}" in message
    assert "note 'hf-mixed-run'" in message and "not released within 0.6 s" in message


def test_holder_details_are_readable_by_others(tmp_path, holder):
    assert holder_of(GPU_A, tmp_path) is None
    other = holder([GPU_A], "label-1")
    wait_held(other)
    info = holder_of(GPU_A, tmp_path)
    assert info.pid == other.pid and info.note == "label-1" and info.uuid == GPU_A
    assert info.format_version == 1 and info.started_at
    other.stdin.close()
    other.wait(10)
    assert holder_of(GPU_A, tmp_path) is None  # released, and its details cleared


def test_a_killed_holder_leaves_no_stale_lock(tmp_path, holder):
    other = holder([GPU_A], "will be killed")
    wait_held(other)
    other.send_signal(signal.SIGKILL)
    other.wait(10)
    assert holder_of(GPU_A, tmp_path) is None  # the kernel dropped the flock with the process
    with reserve_gpus([GPU_A], note="next", directory=tmp_path) as held:
        assert holder_of(GPU_A, tmp_path).note == "next"
        assert held.waited_s < 1


def test_a_waiter_gets_the_gpu_when_the_holder_releases(tmp_path, holder):
    first = holder([GPU_A], "first")
    wait_held(first)
    second = holder([GPU_A], "second", wait_s=20)
    time.sleep(0.5)
    assert holder_of(GPU_A, tmp_path).note == "first"
    assert select.select([second.stdout], [], [], 0)[0] == [] and second.poll() is None  # not held: still waiting
    first.stdin.close()
    waited = wait_held(second)
    # it waited by its own clock; how long depends on when it started under load (0.2 s on a busy 2-core host)
    assert waited > 0
    assert holder_of(GPU_A, tmp_path).pid == second.pid


def test_several_gpus_all_or_nothing(tmp_path, holder):
    other = holder([GPU_B], "holds B")
    wait_held(other)
    with pytest.raises(ReservationTimeout, match="holds B"), reserve_gpus([GPU_A, GPU_B], wait_s=0.2, directory=tmp_path):
        pass
    assert holder_of(GPU_A, tmp_path) is None  # A was taken first, then given back


def test_a_child_inherits_its_parents_reservation(tmp_path):
    child = textwrap.dedent(f"""
        from pathlib import Path
        from openjev_repro.host import reserve_gpus
        with reserve_gpus([{GPU_A!r}], wait_s=0, note="child", directory=Path({str(tmp_path)!r})) as r:
            print(r.inherited[{GPU_A!r}].note)
    """)
    with reserve_gpus([GPU_A], note="parent", directory=tmp_path) as held:
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "parent"
        assert holder_of(GPU_A, tmp_path).note == "parent"  # the child did not take or drop it
    assert held.to_dict()["released_at"]


def test_reservation_record_for_host_json(tmp_path):
    with reserve_gpus([GPU_A], wait_s=1, note="rec", directory=tmp_path) as held:
        record = held.to_dict()
    json.dumps(record)
    assert record["uuids"] == [GPU_A] and record["note"] == "rec" and record["pid"] == os.getpid()
    assert record["lock_dir"] == str(tmp_path) and record["wait_limit_s"] == 1
    assert set(record) >= {"user", "host", "started_at", "waited_s", "inherited"}


def test_lock_dir_from_the_environment(tmp_path, monkeypatch):
    target = tmp_path / "locks"
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(target))
    assert lock_dir() == target and target.is_dir()
    assert target.stat().st_mode & 0o1777 == 0o1777  # shared like /tmp


def test_unusable_lock_dir_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("OPENJEV_LOCK_DIR", str(blocker / "locks"))
    with pytest.raises(HostError, match="set OPENJEV_LOCK_DIR"):
        lock_dir()


def test_nothing_to_reserve(tmp_path):
    with pytest.raises(HostError, match="No GPU was given"), reserve_gpus([], directory=tmp_path):
        pass

"""Exact device checks. The GPU is the FakeGpus test double (no NVIDIA driver runs here);
the processes whose exit check_cleanup verifies are real."""

import subprocess
import threading
import time
from dataclasses import replace

import pytest
from fake_gpus import FakeGpus

from openjev_repro.errors import HostError
from openjev_repro.host import check_cleanup, check_device

PINNED = "GPU-cbf66259-f4ab-0ede-1811-82037dde5924"


@pytest.fixture
def gpus():
    fake = FakeGpus.h200(4)
    # Give GPU 2 the published UUID, like the study's host.
    infos = fake.gpus()
    infos[2] = replace(infos[2], uuid=PINNED)
    return FakeGpus(infos)


def test_the_pinned_device_passes_and_is_recorded(gpus):
    gpus.set_memory(PINNED, 3)
    record = check_device(gpus, 2, PINNED)
    assert record["index"] == 2 and record["uuid"] == PINNED and record["name"] == "NVIDIA H200"
    assert record["memory_used_at_start_mib"] == 3 and record["memory_total_mib"] == 143771
    assert record["busy_at_start"] is False and record["allow_busy"] is False
    assert record["driver"] == {"backend": "fake", "version": "fake-0.0"}


def test_a_pinned_uuid_that_does_not_exist_names_both(gpus):
    wrong = "GPU-deadbeef-0000-0000-0000-000000000000"
    with pytest.raises(HostError) as info:
        check_device(gpus, 2, wrong)
    message = str(info.value)
    assert f"pins GPU index 2 with UUID {wrong}" in message
    assert f"GPU index 2 has UUID {PINNED}" in message and f"no GPU on this host has UUID {wrong}" in message


def test_a_uuid_at_another_index_says_where_it_is(gpus):
    with pytest.raises(HostError, match=f"{PINNED} is GPU index 2"):
        check_device(gpus, 0, PINNED)


def test_an_index_that_does_not_exist(gpus):
    with pytest.raises(HostError, match=r"there is no GPU index 7 \(indices: \[0, 1, 2, 3\]\)"):
        check_device(gpus, 7, PINNED)


def test_a_busy_gpu_is_refused_listing_pids_and_names(gpus):
    gpus.add_process(PINNED, 48113, "python3", 50944)
    gpus.add_process(PINNED, 48190, None)
    with pytest.raises(HostError) as info:
        check_device(gpus, 2, PINNED)
    assert "pid 48113 (python3), pid 48190 (name unknown)" in str(info.value)
    assert "controls.allow_busy" in str(info.value)


def test_allow_busy_is_recorded(gpus):
    gpus.add_process(PINNED, 48113, "python3", 50944)
    record = check_device(gpus, 2, PINNED, allow_busy=True)
    assert record["busy_at_start"] and record["allow_busy"]
    assert record["processes_at_start"] == [{"pid": 48113, "name": "python3", "used_memory_mib": 50944}]


def test_cleanup_passes_when_owned_processes_exited_and_memory_returned(gpus):
    proc = subprocess.Popen(["sleep", "0"], start_new_session=True)
    proc.wait()
    result = check_cleanup(gpus, PINNED, start_mib=0, pids=[proc.pid], pgids=[proc.pid], wait_s=0.5)
    assert result["passed"], result
    assert [c["name"] for c in result["checks"]] == ["owned_processes_exited", "memory_returned"]


def test_cleanup_fails_while_an_owned_process_runs(gpus):
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        gpus.add_process(PINNED, proc.pid, "sleep", 100)
        result = check_cleanup(gpus, PINNED, start_mib=0, pids=[proc.pid], pgids=[proc.pid], wait_s=0)
        owned = result["checks"][0]
        assert not result["passed"] and not owned["passed"]
        assert f"pids [{proc.pid}]" in owned["detail"] and f"pid {proc.pid} (sleep)" in owned["detail"]
    finally:
        proc.kill()
        proc.wait()


def test_cleanup_waits_for_memory_to_come_back(gpus):
    gpus.set_memory(PINNED, 50947)
    threading.Timer(0.3, gpus.set_memory, (PINNED, 0)).start()  # the driver frees it a moment later
    started = time.monotonic()
    result = check_cleanup(gpus, PINNED, start_mib=0, wait_s=10, poll_s=0.05)
    assert result["passed"] and result["checks"][1]["end_mib"] == 0
    assert 0.25 < time.monotonic() - started < 5


def test_cleanup_records_memory_that_did_not_come_back(gpus):
    gpus.set_memory(PINNED, 122)
    result = check_cleanup(gpus, PINNED, start_mib=0, wait_s=0.2, poll_s=0.05)
    memory = result["checks"][1]
    assert not result["passed"] and not memory["passed"]
    assert memory["end_mib"] == 122 and "still 122 MiB above the start" in memory["detail"]

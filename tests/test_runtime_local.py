import time

import pytest
from studykit import PYTHON, SCRIPTED

from openjev_repro.errors import BackendCrashed, BackendNotReady
from openjev_repro.orchestrator.runner import free_port
from openjev_repro.runtime.base import LaunchSpec
from openjev_repro.runtime.local import LocalRuntime


def _spec(tmp_path, fault="none", name="b"):
    port = free_port()
    return LaunchSpec(name=name, argv=[PYTHON, str(SCRIPTED), "--port", str(port)], env={"SCRIPTED_FAULT": fault},
                      host="127.0.0.1", port=port, log_path=tmp_path / f"{name}.log")


def test_start_ready_stop_is_intentional(tmp_path):
    backend = LocalRuntime().launch(_spec(tmp_path))
    assert backend.wait_ready(10)["status"] == "ready"
    record = backend.stop(grace_s=5)
    assert record.stopped_by_us and record.intentional and record.exited
    assert record.signal == "SIGTERM" and not record.killed
    assert backend.stop(5) is record  # idempotent


def test_exit_before_ready_is_reported_with_log(tmp_path):
    backend = LocalRuntime().launch(_spec(tmp_path, "exit_now"))
    with pytest.raises(BackendCrashed, match="exited with status 7(.|\n)*exiting before ready"):
        backend.wait_ready(10)
    record = backend.stop(1)
    assert record.exit_status == 7 and not record.intentional


def test_never_ready_times_out(tmp_path):
    backend = LocalRuntime().launch(_spec(tmp_path, "never_ready"))
    try:
        with pytest.raises(BackendNotReady, match="not ready within 1 s(.|\n)*HTTP 503"):
            backend.wait_ready(1.0)
    finally:
        backend.stop(2)


def test_sigterm_ignored_is_killed_after_grace(tmp_path):
    backend = LocalRuntime().launch(_spec(tmp_path, "ignore_sigterm"))
    backend.wait_ready(10)
    started = time.monotonic()
    record = backend.stop(grace_s=1.0)
    assert record.killed and record.signal == "SIGKILL" and record.exited and record.intentional
    assert time.monotonic() - started >= 1.0
    assert "ignoring SIGTERM" in (tmp_path / "b.log").read_text()

"""Driver detection, for real: this machine (and CI) has no NVIDIA driver."""

import os
import shutil

import pytest
from fake_gpus import FakeGpus

from openjev_repro.errors import HostError
from openjev_repro.host import NoDriver, detect_driver
from openjev_repro.host.nvml import NvmlDriver
from openjev_repro.host.smi import SmiDriver


def _driver_present() -> bool:
    try:
        detect_driver().close()
        return True
    except NoDriver:
        return False


def _nvml_starts() -> bool:
    try:
        NvmlDriver().close()
        return True
    except HostError:
        return False


no_driver = pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present on this host")


@no_driver
def test_no_driver_is_a_clear_message():
    with pytest.raises(NoDriver) as info:
        detect_driver()
    message = str(info.value)
    assert message.startswith("No NVIDIA driver was found on this host: NVML could not start")
    assert "Run this on a GPU host with the NVIDIA driver installed." in message
    if shutil.which("nvidia-smi") is None:
        assert "nvidia-smi is not on PATH." in message
    assert isinstance(info.value, HostError)


@no_driver
def test_nvml_backend_refuses_without_the_library():
    with pytest.raises(HostError, match="NVML could not start"):
        NvmlDriver()


# A recorded nvidia-smi: the tests' double for the NVIDIA driver, which cannot run here. It answers the
# queries SmiDriver makes with the output of a one-H200 machine (tests/test_host_smi.py, driver 580.159.04).
RECORDED_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=driver_version*) echo "580.159.04" ;;
  *--query-gpu=index,uuid,*) echo "0, GPU-f7740697-acc6-b04a-beb3-5d2a3eadb800, NVIDIA H200, 0, 143771, 00000000:00:06.0" ;;
  *) echo "unexpected query: $*" >&2; exit 9 ;;
esac
"""


def test_detection_returns_a_driver_or_no_driver_never_a_double(tmp_path, monkeypatch):
    """NVML first, then nvidia-smi, then NoDriver: nothing else (FakeGpus exists only where a test builds it)."""
    empty, recorded = tmp_path / "empty", tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "nvidia-smi").write_text(RECORDED_NVIDIA_SMI)
    (recorded / "nvidia-smi").chmod(0o755)
    nvml = _nvml_starts()
    monkeypatch.setenv("PATH", str(empty))  # no nvidia-smi at all
    if nvml:
        driver = detect_driver()
        assert type(driver) is NvmlDriver and driver.name == "nvml"
        driver.close()
    else:
        with pytest.raises(NoDriver):
            detect_driver()
    monkeypatch.setenv("PATH", f"{recorded}{os.pathsep}/usr/bin:/bin")
    driver = detect_driver()
    try:
        assert type(driver) in (NvmlDriver, SmiDriver)
        if not nvml:  # NVML cannot start here, so the answer came through the recorded nvidia-smi
            assert type(driver) is SmiDriver and driver.name == "nvidia-smi"
            assert driver.driver_version() == "580.159.04"
            assert [(g.index, g.name, g.memory_total_mib) for g in driver.gpus()] == [(0, "NVIDIA H200", 143771)]
    finally:
        driver.close()


def test_fake_unknown_uuid_is_an_error():
    fake = FakeGpus.h200(2)
    with pytest.raises(HostError, match="No GPU with UUID GPU-nope"):
        fake.memory_used_mib("GPU-nope")

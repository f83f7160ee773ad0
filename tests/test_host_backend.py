"""Driver detection, for real: this machine (and CI) has no NVIDIA driver."""

import shutil

import pytest
from fake_gpus import FakeGpus

from openjev_repro.errors import HostError
from openjev_repro.host import NoDriver, detect_driver
from openjev_repro.host.nvml import NvmlDriver


def _driver_present() -> bool:
    try:
        detect_driver().close()
        return True
    except NoDriver:
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


def test_fake_gpus_is_never_detected():
    # The double exists only where a test builds it.
    assert FakeGpus.h200(1).name == "fake"
    try:
        backend = detect_driver()
    except NoDriver:
        return
    assert backend.name in ("nvml", "nvidia-smi")
    backend.close()


def test_fake_unknown_uuid_is_an_error():
    fake = FakeGpus.h200(2)
    with pytest.raises(HostError, match="No GPU with UUID GPU-nope"):
        fake.memory_used_mib("GPU-nope")

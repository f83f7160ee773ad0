"""docs/host.md's library example runs as written, and the package exports what it lists."""

import re
import shutil
from pathlib import Path

import pytest

from openjev_repro import host

DOC = Path(__file__).resolve().parents[1] / "docs" / "host.md"


@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed (apt-get install numactl)")
def test_the_library_example_runs():
    example = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)[1]
    scope: dict = {}
    exec(compile(example, str(DOC), "exec"), scope)  # noqa: S102 - the documented example, run as written
    assert scope["cleanup"]["passed"] and scope["binding"]["memory_policy"] == "bind:0"
    assert (scope["run"] / "memory.jsonl").exists() and (scope["run"] / "host.json").exists()


def test_every_exported_name_exists_and_is_documented():
    text = DOC.read_text()
    for name in host.__all__:
        assert hasattr(host, name), name
    for name in ("reserve_gpus", "run_with_timeout", "check_device", "check_cleanup", "numa_prefix",
                 "docker_cpuset", "effective_binding", "MemorySampler", "host_record", "detect_driver"):
        assert f"`{name}(" in text or f"{name}(" in text, name

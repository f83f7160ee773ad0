"""docs/host.md's library example runs as written, and the package exports what it lists."""

import re
import shutil
from pathlib import Path

import pytest

from openjev_repro import host

DOC = Path(__file__).resolve().parents[1] / "docs" / "host.md"


@pytest.mark.slow  # the documented example starts numactl: tests/tiers.py's rule does not see it
@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed (apt-get install numactl)")
def test_the_library_example_runs():
    example = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)[1]
    scope: dict = {}
    exec(compile(example, str(DOC), "exec"), scope)  # noqa: S102 - the documented example, run as written
    assert scope["cleanup"]["passed"] and scope["binding"]["effective"]["hf"]["memory_policy"] == "bind:0"
    assert (scope["run"] / "memory.jsonl").exists() and (scope["run"] / "host.json").exists()


def _documented(name: str, text: str) -> bool:
    """The name appears as a word inside an inline code span (`name(...)`, `with name(...)`, `Name`)."""
    return re.search(rf"`[^`\n]*\b{re.escape(name)}\b[^`\n]*`", text) is not None


def test_every_exported_name_exists_and_is_documented():
    text = DOC.read_text()
    assert host.__all__ and len(host.__all__) == len(set(host.__all__))
    assert [name for name in host.__all__ if not hasattr(host, name)] == []
    assert [name for name in host.__all__ if not _documented(name, text)] == []

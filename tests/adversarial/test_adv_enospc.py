"""ENOSPC: a full disk at any writing stage leaves an incomplete run, one `error:` line, no temporary file,
no backend process, and never a report or manifest that looks complete.

The run directory lives on a small tmpfs mounted by the test (root only; CI runs as root). Sizes:
4 KiB (the state file only: the recipe copy fails), 40 KiB (rows and responses, mid-pass), the
reference run's usage minus 60 KiB (the report's plots) and minus 8 KiB (the manifest, written
after status "complete": the run must turn back to incomplete).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from invoking import INVOKE
from studykit import scripted_backend, write_study
from test_adv_kill_study import marked

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tmpfs(tmp_path_factory):
    """mount(size_kib) -> a fresh tmpfs of that size; every mount is undone at the end."""
    base = tmp_path_factory.mktemp("tmpfs")
    mounted: list[Path] = []

    def mount(size_kib: int) -> Path:
        point = base / f"m{len(mounted)}-{size_kib}k"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(point)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {proc.stderr.strip()}")
        mounted.append(point)
        return point

    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and the mount command; CI runs as root")
    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("enospc-study")
    marker = secrets.token_hex(8)
    backend = scripted_backend("one")
    backend["env"]["ADV_MARKER"] = marker
    return write_study(tmp, [backend], n=4), marker


def run_on(mount_point: Path, recipe: Path) -> tuple[subprocess.CompletedProcess, Path | None]:
    proc = subprocess.run([*INVOKE, "study", "--recipe", str(recipe), "--out", str(mount_point / "runs")],
                          capture_output=True, text=True, timeout=120, check=False)
    runs = sorted((mount_point / "runs").glob("*")) if (mount_point / "runs").exists() else []
    return proc, runs[0] if runs else None


@pytest.fixture(scope="module")
def reference_kib(tmpfs, study) -> int:
    """KiB a complete run uses on tmpfs (the control: the same study completes when space suffices)."""
    point = tmpfs(4096)
    proc, run = run_on(point, study[0])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((run / "state.json").read_text())["status"] == "complete"
    stat = os.statvfs(point)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize // 1024


def check_failed_run(proc, run: Path, marker: str) -> dict:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith("error: OSError: No space left on device"), proc.stderr[-3000:]
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "incomplete" and "No space left on device" in state["error"]
    assert [p.name for p in run.rglob(".*")] == []  # no temporary file survives
    assert marked(marker) == []
    if (run / "report.md").exists():
        assert "INCOMPLETE RUN" in (run / "report.md").read_text()
    return state


@pytest.mark.parametrize("size,stage", [(4, None), (40, "backend:one")])
def test_full_disk_early_and_mid_pass(tmpfs, study, size, stage):
    recipe, marker = study
    proc, run = run_on(tmpfs(size), recipe)
    state = check_failed_run(proc, run, marker)
    assert (state["attempted"][-1:] or [None]) == [stage]
    assert not (run / "manifest.dsse.json").exists()


def test_full_disk_while_writing_the_plots(tmpfs, study, reference_kib):
    recipe, marker = study
    proc, run = run_on(tmpfs(reference_kib - 60), recipe)
    state = check_failed_run(proc, run, marker)
    assert state["attempted"][-1] == "report" and "report" not in state["finished"]
    assert not (run / "manifest.dsse.json").exists()


def test_full_disk_while_writing_the_manifest_after_complete(tmpfs, study, reference_kib):
    """The manifest (16 KiB) is the last write; plots differ by a page between runs, so the size that
    leaves too little room for it alone is searched around the reference usage minus 8 KiB."""
    recipe, marker = study
    size = reference_kib - 8
    for _ in range(4):
        proc, run = run_on(tmpfs(size), recipe)
        if proc.returncode == 0:  # this run's files were smaller: less room
            size -= 4
            continue
        state = check_failed_run(proc, run, marker)
        if "report" not in state["finished"]:  # failed before the manifest: more room
            size += 4
            continue
        assert not (run / "manifest.dsse.json").exists()  # it had been complete; the manifest failure turned it back
        assert "INCOMPLETE RUN" in (run / "report.md").read_text()
        return
    pytest.fail("no tmpfs size made the manifest the write that failed")

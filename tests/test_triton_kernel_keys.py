"""scripts/triton-kernel-keys.py on two real copies of the package: Triton keys the project's kernels by their
text and their first line, so moving a kernel down its file (no change of its text) changes its key, the
cause of the best configuration's pinned cache gaining kernels in results/h200-fast-27b-shape/rerun/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from triton_interpreter import interpreter_env

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "triton-kernel-keys.py"


def _copy(root: Path) -> Path:
    shutil.copytree(REPO / "openjev_repro", root / "openjev_repro", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _keys(*checkouts: Path) -> subprocess.CompletedProcess:
    interpreter_env()  # skips (or fails under OPENJEV_REQUIRE_TRITON=1) where triton is not importable
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, checkouts)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_a_kernel_moved_down_its_file_gets_another_key_and_the_others_keep_theirs(tmp_path):
    a, b = _copy(tmp_path / "a"), _copy(tmp_path / "b")
    same = _keys(a, b)
    assert same.returncode == 0, same.stderr
    assert "same keys" in same.stdout
    module = b / "openjev_repro" / "backend" / "conv_silu.py"
    module.write_text(module.read_text().replace("\nBLOCK_T = 16\n", "\n# one line more above the kernel\nBLOCK_T = 16\n"))
    moved = _keys(a, b)
    assert moved.returncode == 1 and "keys differ" in moved.stdout
    rows = [line.split() for line in moved.stdout.splitlines()[1:-1]]
    by_kernel: dict[str, list[list[str]]] = {}
    for row in rows:
        by_kernel.setdefault(row[0], []).append(row)
    (first, second) = by_kernel["conv_silu_kernel"]
    assert int(second[2]) == int(first[2]) + 1 and first[3] == second[3] and first[4] != second[4]  # text same
    for name in ("gated_norm_kernel", "silu_mul_kernel"):
        assert by_kernel[name][0][2:] == by_kernel[name][1][2:]


def test_a_folder_that_is_no_checkout_is_one_error_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")

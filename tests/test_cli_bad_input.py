"""Every task through a table of bad arguments: one `error:` line, exit 1, never a traceback.

Real `invoke` subprocesses in a scratch directory (a copy of tasks.py and the bad inputs):
a directory where a file is expected, a FIFO (which would block a reader forever), a
non-UTF-8 file, a missing path, an unreadable file (/proc/self/mem when running as root), bad numbers
and names. Then a closed pipe: the task stops quietly, as `| head -1` expects.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from invoking import INVOKE, invoke

REPO = Path(__file__).resolve().parents[1]
DEMO_RECIPE = str(REPO / "recipes" / "demo.yaml")
BROKEN_PIPE_EXIT = 141

# Tasks that read no file and take no value that could be bad.
NO_INPUT = {"gpus"}


def bad_inputs(tmp: Path) -> dict[str, str]:
    (tmp / "a-directory").mkdir()
    os.mkfifo(tmp / "a-fifo")
    (tmp / "not-utf8").write_bytes(b"\xff\xfe\x00format_version: [\x80\x81")
    paths = {"directory": tmp / "a-directory", "fifo": tmp / "a-fifo", "binary": tmp / "not-utf8",
             "missing": tmp / "no-such-file"}
    if os.geteuid() != 0:
        (tmp / "unreadable").write_text("format_version: 1\n")
        (tmp / "unreadable").chmod(0)
        paths["unreadable"] = tmp / "unreadable"
    else:  # root reads a chmod-0 file; /proc/self/mem is a regular file whose first read fails for root too
        paths["unreadable"] = Path("/proc/self/mem")
    return {k: str(v) for k, v in paths.items()}


def cases(bad: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(task, argv): each reader gets every kind of bad path; the tasks sharing a reader (the four
    recipe tasks, the run-directory tasks) take turns through the kinds, to keep the test short."""
    every_kind = {
        "verify": ["--run", "{}"], "report": ["--run", "{}", "--out", "report-out"], "claims": ["--file", "{}"],
        "plan": ["--recipe", "{}"], "fixture": ["--out", "fixture-out", "--lengths", "{}"],
    }
    taking_turns = {
        "compare": ["--baseline", "{}", "--candidate", "{}"], "import-evidence": ["--src", "{}", "--out", "imported"],
        "study": ["--recipe", "{}"],
        "publish": ["--run", "{}", "--out", "b.tar.gz"], "sign": ["--run", "{}"],
        "prepare": ["--recipe", "{}", "--dry-run"], "verify-inputs": ["--recipe", "{}"],
        "environment": ["--recipe", "{}"],
        "submit": ["--recipe", "{}", "--replicates", "2", "--key", "{}"], "status": ["--submission", "{}"],
        "collect": ["--submission", "{}"],
        "kernel-cache": ["--run", "{}", "--backend", "one", "--out", "caches.tar.xz"],
        "reproduce": ["--original", "{}", "--rerun", "{}", "--pubkey", "{}"],
    }
    kinds = list(bad.values())
    out = [(task, [a.replace("{}", path) for a in argv]) for task, argv in every_kind.items() for path in kinds]
    for n, (task, argv) in enumerate(taking_turns.items()):
        for path in (kinds[n % len(kinds)], kinds[(n + 2) % len(kinds)]):
            out.append((task, [a.replace("{}", path) for a in argv]))
    out += [
        ("keygen", ["--out", bad["fifo"]]),
        ("keygen", ["--out", bad["binary"]]),
        ("study", ["--recipe", DEMO_RECIPE, "--key", bad["binary"]]),
        ("verify", ["--run", str(REPO / "results" / "h200-reference-27b-shape" / "run"), "--pubkey", bad["binary"]]),
        ("publish", ["--run", bad["directory"], "--out", "bundle.json"]),
        ("demo", ["--out", bad["binary"]]),
        ("demo", ["--runtime", "podman"]),
        ("study", ["--recipe", DEMO_RECIPE, "--runtime", "podman"]),
        ("study", ["--recipe", DEMO_RECIPE, "--out", bad["binary"]]),
        ("lock", ["--backend", "no-such-image"]),
        ("build", ["--backend", bad["directory"]]),
        ("sbom", ["--backend", "no-such-image"]),
        ("sbom", ["--backend", "hf", "--out", bad["directory"]]),
        ("reserve", ["--gpu-ids", "0"]),
        ("reserve", ["--gpu-ids", "GPU-x", "--timeout", "soon", "--", "true"]),
        ("bench-client", ["--requests", "many", "--out", ""]),
        ("bench-hash", ["--sizes", "1Q", "--out", ""]),
        ("bench-hash", ["--sizes", "1K", "--dir", bad["fifo"], "--out", ""]),
        ("bench-calibrate", ["--requests", "-"]),
        ("bench-audit", ["--sizes", "1Q", "--out", ""]),
        ("bench-audit", ["--source", bad["directory"], "--sizes", "1", "--out", ""]),
        ("submit", ["--recipe", DEMO_RECIPE, "--replicates", "many", "--key", bad["binary"]]),
        ("submit", ["--resume", bad["fifo"]]),
        ("collect", ["--submission", bad["directory"], "--tolerances", bad["binary"]]),
    ]
    return out


def run_invoke(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return invoke(*args, cwd=cwd, timeout=60, env={"COLUMNS": "100", "DOCKER_HOST": f"unix://{cwd}/no.sock"})


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("bad")
    shutil.copyfile(REPO / "tasks.py", cwd / "tasks.py")
    return cwd


def test_every_task_turns_bad_input_into_one_error_line(scratch):
    table = cases(bad_inputs(scratch))
    listed = run_invoke(["--list"], scratch)
    tasks = set(re.findall(r"^  (\S+)", listed.stdout, re.MULTILINE))
    assert tasks - NO_INPUT <= {task for task, _ in table}, "a task is missing from the bad-input table"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: run_invoke([case[0], *case[1]], scratch), table))
    problems = []
    for (task, argv), done in zip(table, results, strict=True):
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        if done.returncode != 1 or len(errors) != 1 or "Traceback" in done.stdout + done.stderr:
            problems.append(f"invoke {task} {' '.join(argv)} -> {done.returncode}\n{done.stdout[-300:]}{done.stderr[-600:]}")
    assert not problems, "\n\n".join(problems)
    assert not (scratch / "bundle.json").exists() and not (scratch / "b.tar.gz").exists()


@pytest.mark.parametrize("argv", [["plan", "--recipe", DEMO_RECIPE, "--json"],
                                  ["claims", "--file", str(next((REPO / "manifests" / "published").glob("*.yaml")))]])
def test_a_closed_pipe_ends_the_task_quietly(argv, tmp_path):
    shutil.copyfile(REPO / "tasks.py", tmp_path / "tasks.py")
    proc = subprocess.Popen(INVOKE + argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first write, as after `| head -1`
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == BROKEN_PIPE_EXIT, err
    assert err == b""


def test_head_1_of_a_pipeline(tmp_path):
    shutil.copyfile(REPO / "tasks.py", tmp_path / "tasks.py")
    invoke = " ".join(INVOKE)
    done = subprocess.run(["bash", "-c", f"{invoke} plan --recipe {DEMO_RECIPE} | head -1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("study demo-reference-cpu"), done
    assert done.stderr == ""

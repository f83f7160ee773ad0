"""Every task answers `invoke TASK --help` without side effects, and names a missing required option.

Each task runs as a real `invoke` subprocess in a scratch directory holding only a copy of
tasks.py, so a task that took `--help` as a value (and wrote `./--help/`) would be caught.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from invoking import invoke

REPO = Path(__file__).resolve().parents[1]


def scratch_copy(tmp: Path) -> Path:
    shutil.copyfile(REPO / "tasks.py", tmp / "tasks.py")
    return tmp


def run_invoke(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return invoke(*args, cwd=cwd, timeout=timeout, env={"COLUMNS": "100"})


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def task_names(cwd: Path) -> list[str]:
    listed = run_invoke(["--list"], cwd)
    assert listed.returncode == 0, listed.stderr
    names = re.findall(r"^  (\S+)", listed.stdout, re.MULTILINE)
    assert len(names) >= 20, listed.stdout
    return names


def option_blocks(help_text: str) -> list[str]:
    """Each option's entry in `invoke TASK --help`: its flags, then its (possibly wrapped) help."""
    body = help_text.split("Options:", 1)[-1]
    return [b.strip() for b in re.split(r"\n  (?=-)", body) if b.strip().startswith("-")]


def required_options(help_text: str) -> list[str]:
    """Options whose help (possibly wrapped) ends in "(required)"."""
    return [re.search(r"--([a-z0-9-]+)", o).group(1) for o in option_blocks(help_text)
            if "(required)" in " ".join(o.split())]


@pytest.fixture(scope="module")
def help_answers(tmp_path_factory) -> tuple[Path, dict[str, subprocess.CompletedProcess], set[str]]:
    cwd = scratch_copy(tmp_path_factory.mktemp("help"))
    before = tree(cwd)
    names = task_names(cwd)
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = dict(zip(names, pool.map(lambda n: run_invoke([n, "--help"], cwd), names), strict=True))
    return cwd, answers, before


def test_every_task_answers_help_with_usage_and_every_option(help_answers):
    _, answers, _ = help_answers
    for name, done in answers.items():
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        assert f"{name} [--options]" in done.stdout, (name, done.stdout)
        assert "Docstring:" in done.stdout and "Options:" in done.stdout, (name, done.stdout)
        assert "Traceback" not in done.stderr and not done.stderr.startswith("error:"), (name, done.stderr)
        # every option carries its own help text, on the line that names it
        blocks = option_blocks(done.stdout)
        assert blocks and len(blocks) == len(re.findall(r"^  -", done.stdout, re.MULTILINE)), (name, done.stdout)
        for block in blocks:
            assert re.match(r"-\S.*?\s{2,}\S", block), (name, block)


def test_help_writes_nothing(help_answers):
    cwd, _, before = help_answers
    assert tree(cwd) == before


def test_a_missing_required_option_is_one_error_line_naming_it(help_answers):
    cwd, answers, before = help_answers
    needed = {name: required_options(done.stdout) for name, done in answers.items()}
    needed = {name: opts for name, opts in needed.items() if opts}
    # the tasks that take a file or directory all declare it required
    # (study takes --recipe or --plan: tests/test_study_plan_file.py holds its one line for neither)
    assert {"verify", "report", "claims", "compare", "publish", "keygen", "fixture", "plan",
            "verify-inputs"} <= set(needed), needed
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = dict(zip(needed, pool.map(lambda n: run_invoke([n], cwd), needed), strict=True))
    for name, done in runs.items():
        assert done.returncode == 1, (name, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --"), (name, done.stderr)
        assert re.match(r"error: --([a-z0-9-]+) is required", lines[0]).group(1) in needed[name], (name, lines)
        assert done.stdout == "", (name, done.stdout)
    assert tree(cwd) == before


HEAVY = ("torch", "transformers", "matplotlib", "docker", "rich")


@pytest.mark.parametrize("args", [["--list"], ["verify", "--run", "results/h200-reference-27b-shape/run",
                                               "--pubkey", "results/h200-reference-27b-shape/signing-key.pub"]])
def test_light_tasks_import_no_heavy_package(args):
    """Lazy task modules: listing tasks and verifying a run never load torch, matplotlib, docker or rich."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "invoke", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "invoke" in imported
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert heavy == [], heavy


def test_help_shows_every_option_once_with_its_type(help_answers):
    """No `--=STRING` (invoke's short flag taken from a dash), numbers as INT/FLOAT, a repeatable
    name=/path option with its value, and no pair of options that mean the same thing."""
    import inspect as inspect_

    from openjev_repro.cli import collect_tasks, option_name

    _, answers, _ = help_answers
    for task in collect_tasks():
        text = answers[task.name.replace("_", "-")].stdout
        flags = [b.split("  ")[0] for b in option_blocks(text)]
        assert not [f for f in flags if re.search(r"(^|, )--[=\[ ]|(^|, )-[^a-z0-9-]", f)], (task.name, flags)
        longs = [re.search(r"--(?:\[no-\])?([a-z0-9-]+)", f).group(1) for f in flags]
        assert len(longs) == len(set(longs)), (task.name, longs)
        for p in list(inspect_.signature(task.body).parameters.values())[1:]:
            kind = {int: "INT", float: "FLOAT"}.get(type(p.default))
            if kind and type(p.default) is not bool:
                entry = next(f for f in flags if f"{option_name(p.name)}=" in f)
                assert f"{option_name(p.name)}={kind}" in entry, (task.name, entry)
    environment = next(f for f in option_blocks(answers["environment"].stdout) if "--python" in f)
    assert environment.startswith("-p NAME=PATH, --python=NAME=PATH"), environment
    publish = answers["publish"].stdout
    assert "--include-bodies" in publish and "--[no-]" not in publish  # two distinct options, neither a negation


def test_a_repeatable_option_without_its_value_is_refused(tmp_path):
    done = run_invoke(["environment", "--python"], scratch_copy(tmp_path))
    assert done.returncode == 1 and done.stderr == "error: --python needs a value.\n", (done.returncode, done.stderr)
    assert done.stdout == ""

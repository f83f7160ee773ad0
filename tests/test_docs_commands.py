"""The commands README.md and docs/*.md show, run as shown (issue 41, item 4 and "git status is clean
after every README and docs command").

Every `.venv/bin/invoke …` line of a code block is read from the documents themselves. Those that
need nothing but this checkout (no placeholder, no GPU, no inputs to download or build, no study)
are run here exactly as written, from the repository root: each must succeed without a traceback,
and together they must leave `git status` as it was. The others are named by why they are left out,
so a new documented command is either run or consciously skipped. The documented commands that
need a demo run are held elsewhere (tests/test_newcomer_41.py: bench-audit, sign, verify-inputs).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from invoking import REPO, invoke

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Tasks that read only the checkout (and write nothing into it); their documented lines must run as shown.
SELF_CONTAINED = {"--list", "plan", "claims", "gpus", "prepare", "verify", "compare", "environment", "keygen",
                  "fixture", "reserve"}
PLACEHOLDER = re.compile(r"<|>|\[|…|\.\.\.|\$\w|\bRUN\b|RUN_DIR|ARTIFACTS|CMD|LABEL|/data/|/shared/|/path/|~/")


def documented_commands() -> list[tuple[str, str]]:
    """(document, the arguments after `.venv/bin/invoke`) of every command line in a code block."""
    found = []
    for path in DOCUMENTS:
        in_block, pending = False, ""
        for raw in path.read_text(encoding="utf-8").splitlines():
            if raw.startswith("```"):
                in_block, pending = not in_block, ""
                continue
            if not in_block:
                continue
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            match = re.match(r"^(?:\$ )?(?:\w+=\S+ )*\.venv/bin/invoke (.*)$", line)
            if match:
                found.append((path.name, match.group(1).split("  #")[0].split(" # ")[0].strip()))
    return found


def runnable_here(args: str) -> bool:
    words = args.split()
    if PLACEHOLDER.search(args) or not words:
        return False
    task = words[0]
    if task == "prepare":
        return "--dry-run" in words  # the real one downloads
    if task in ("fixture", "keygen", "reserve", "environment"):
        return False  # write keys or a fixture, take a GPU lock, probe other interpreters: not read-only
    if "--out" in words:
        return False  # writes a new file (e.g. `plan --out plan.json`), refused the second time: not read-only
    if task in ("verify", "compare"):  # only over what the checkout holds (committed runs)
        return all(Path(REPO, w).exists() and Path(REPO, w).resolve().is_relative_to(REPO)
                   for w in words[1:] if not w.startswith("-"))  # /tmp/imp of an earlier example is not the checkout's
    return task in SELF_CONTAINED or words[-1] == "--help"


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=60).stdout


def test_the_documents_show_commands_and_some_run_here():
    commands = documented_commands()
    assert len(commands) > 40
    assert sum(runnable_here(args) for _, args in commands) >= 10


def test_every_self_contained_documented_command_runs_as_shown_and_leaves_git_status_clean():
    before = _git_status()
    failed = []
    for document, args in documented_commands():
        if not runnable_here(args):
            continue
        done = invoke(*shlex.split(args), timeout=300)
        if done.returncode != 0 or "Traceback" in done.stderr:
            failed.append(f"{document}: invoke {args} -> {done.returncode}: {done.stderr.strip()[-300:]}")
    assert not failed, "\n".join(failed)
    assert _git_status() == before, "a documented command left files in the checkout"


@pytest.mark.parametrize(("document", "wrong"), [
    ("rerun-h200.md", "study --recipe recipes/open-jev-h200-hf-comparison-2026-10-03.yaml --inputs "),
    ("rerun-h200.md", "\ngpu run "),
    ("host.md", "invoke study recipe.yaml"),
    ("README.md", "713 passed"),
    ("README.md", "~4 min"),
])
def test_no_document_shows_a_command_or_figure_found_wrong(document, wrong):
    text = next(p for p in DOCUMENTS if p.name == document).read_text(encoding="utf-8")
    assert wrong not in text


def test_every_documented_study_option_exists():
    """`invoke study` lines name only options study has (the `--inputs` of plan and prepare is not one)."""
    help_text = invoke("study", "--help").stdout
    for document, args in documented_commands():
        if args.startswith("study "):
            for option in re.findall(r"(--[a-z][a-z-]*)", args):
                assert option in help_text, f"{document}: invoke {args}: no option {option}"


def test_the_smoke_benchmark_keeps_its_logs_out_of_the_checkout():
    from openjev_repro.backend.smoke import _parser

    logs = _parser().parse_args(["--checkpoint", "c", "--requests", "r"]).logs
    assert logs == Path(".cache") / "smoke"  # ignored by git (.gitignore: /.cache/)
    assert "/.cache/" in (REPO / ".gitignore").read_text().splitlines()

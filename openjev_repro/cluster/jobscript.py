"""The batch script of one sbatch round and the sbatch options that go with it.

Options travel on sbatch's command line (no shell quoting in #SBATCH lines to get wrong); the
script repeats them in a comment, escaped to one line, so the file alone says what was submitted
and no recipe text (a note holding a newline) can reach the shell.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import msgspec

from ..evidence.recipe import parse_duration

__all__ = ["SbatchOptions", "one_line", "render_script", "sbatch_argv", "slurm_time"]


class SbatchOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """sbatch's options of a submission (submission.json's `sbatch_options`)."""

    partition: str | None = None
    gres: str | None = None  # e.g. gpu:1 (or gpu:h200:1)
    time: str | None = None  # a duration such as 45m or 2h
    account: str | None = None
    exclusive: bool = False  # the whole node (other jobs' GPU/CPU load changes latency)
    cpus_per_task: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"partition": self.partition, "gres": self.gres, "time": self.time, "account": self.account,
                "exclusive": self.exclusive, "cpus_per_task": self.cpus_per_task}


def slurm_time(duration: str) -> str:
    """45m -> 0-00:45:00 (Slurm's days-hours:minutes:seconds); rounds up to whole seconds."""
    total = int(-(-parse_duration(duration) // 1))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}"


def _array(replicates: list[int]) -> str:
    return ",".join(str(k) for k in sorted(replicates))


def sbatch_argv(opts: SbatchOptions, *, replicates: list[int], submission: Path, job_name: str, comment: str,
                workdir: Path) -> list[str]:
    argv = [f"--array={_array(replicates)}", f"--job-name={job_name}", f"--comment={comment}",
            f"--output={submission}/replicate-%a/slurm-%A_%a.out", f"--chdir={workdir}",
            "--ntasks=1", "--nodes=1"]
    if opts.partition:
        argv.append(f"--partition={opts.partition}")
    if opts.gres:
        argv.append(f"--gres={opts.gres}")
    if opts.time:
        argv.append(f"--time={slurm_time(opts.time)}")
    if opts.account:
        argv.append(f"--account={opts.account}")
    if opts.exclusive:
        argv.append("--exclusive")
    if opts.cpus_per_task:
        argv.append(f"--cpus-per-task={opts.cpus_per_task}")
    return argv


def one_line(text: str) -> str:
    """text with every unprintable character (newline, CR, other controls) escaped: it cannot end a line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def render_script(*, submission: Path, python: str, argv: list[str], round_number: int) -> str:
    """`exec` makes the task's Python the batch step's main process: Slurm's SIGTERM reaches it.

    The comment lines are escaped to one line each (a newline in a recipe's note would otherwise
    start a shell command); the only command is the `exec` line, every word of it shell-quoted."""
    script = submission / f"job-{round_number}.sh"
    lines = ["#!/bin/bash",
             one_line(f"# openjev-repro submission {submission.name}, round {round_number}; submitted as:"),
             one_line(f"#   sbatch --parsable {shlex.join(argv)} {shlex.quote(str(script))}"),
             "# Each array task runs the whole study (`invoke study`) for replicate-$SLURM_ARRAY_TASK_ID.",
             f"exec {shlex.quote(python)} -m openjev_repro.cluster.task --submission {shlex.quote(str(submission))}",
             ""]
    return "\n".join(lines)

"""Tasks for studies on a Slurm cluster: submit, status, collect (docs/cluster.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from invoke import Exit, task

from ..errors import RecipeError
from ..printable import printable
from . import user_errors

if TYPE_CHECKING:
    from ..cluster.status import ReplicateStatus

__all__ = ["collect_task", "status_task", "submit_task"]


def _required(value: object, name: str, task_name: str) -> None:
    if value in (None, ""):
        raise RecipeError(f"--{name} is required; `invoke {task_name} --help` lists every option.")


@task(name="submit", help={
    "recipe": "recipe YAML of the study each replicate runs",
    "replicates": "number of replicate studies (array tasks), each on the node Slurm picks",
    "key": "Ed25519 private key each task signs its run with (must be readable on the nodes)",
    "partition": "Slurm partition (default: the cluster's default)",
    "gres": "generic resources per task, e.g. gpu:1 (required when the recipe pins a GPU)",
    "time": "time limit per task, e.g. 45m (default: the recipe's reservation timeout, else the partition's)",
    "account": "Slurm account to charge",
    "exclusive": "whole nodes per task (nothing else runs beside the study)",
    "out": "parent of the submission directory, on storage every node mounts (default: runs/)",
    "resume": "an existing submission directory: resubmit only replicates without complete evidence",
})
@user_errors
def submit_task(c, recipe=None, replicates=None, key=None, partition=None, gres=None, time=None, account=None,
                exclusive=False, out="runs", resume=None):
    """Submit a study as one Slurm job array of replicates; the last line is the submission directory."""
    from ..cluster.jobscript import SbatchOptions
    from ..cluster.submit import resume as resume_submission
    from ..cluster.submit import submit

    if resume:
        given = [f"--{n}" for n, v in (("recipe", recipe), ("replicates", replicates), ("key", key),
                                       ("partition", partition), ("gres", gres), ("time", time),
                                       ("account", account)) if v is not None]
        if given or exclusive:
            raise RecipeError(f"--resume reuses the submission's recipe, key and sbatch options; drop "
                              f"{', '.join(given + (['--exclusive'] if exclusive else []))}")
        sub, todo, skipped = resume_submission(Path(resume))
        for k, why in sorted(skipped.items()):
            print(f"replicate {k}: not resubmitted ({why})", file=sys.stderr)
        if todo:
            print(f"resubmitted replicates {', '.join(map(str, todo))} as job {sub.rounds[-1].array_job_id}",
                  file=sys.stderr)
        else:
            print("nothing to resubmit", file=sys.stderr)
        sys.stdout.write(f"{sub.path}\n")
        return
    _required(recipe, "recipe", "submit")
    _required(replicates, "replicates", "submit")
    _required(key, "key", "submit")
    try:
        count = int(replicates)
    except ValueError:
        raise RecipeError(f"--replicates must be a whole number, not {replicates!r}") from None
    options = SbatchOptions(partition=partition, gres=gres, time=time, account=account, exclusive=exclusive)
    sub = submit(recipe=Path(recipe), replicates=count, key=Path(key), out=Path(out), options=options)
    round_ = sub.rounds[-1]
    print(f"submitted job array {round_.array_job_id} ({count} replicates): {' '.join(round_.sbatch)}",
          file=sys.stderr)
    sys.stdout.write(f"{sub.path}\n")


@task(name="status", help={
    "submission": "the submission directory `invoke submit` printed",
    "json": "print the status as JSON instead of a table",
    "wait": "poll every 5 s until no replicate's task is pending or running, then print",
})
@user_errors
def status_task(c, submission=None, json_=False, wait=False):
    """Each replicate's Slurm state (from squeue/sacct JSON) and evidence state.

    Also records the final Slurm state of ended tasks in their attempt records and runs."""
    import time as clock

    from ..cluster.status import replicate_status
    from ..cluster.submission import Submission

    _required(submission, "submission", "status")
    sub = Submission.open(Path(submission))
    rows = replicate_status(sub)
    while wait and any(r.running for r in rows):
        clock.sleep(5)
        rows = replicate_status(sub)
    if json_:
        sys.stdout.write(json.dumps({"submission": str(sub.path), "replicates": [r.to_json() for r in rows]},
                                    indent=2) + "\n")
        return
    from .output import console, keep_words_whole

    out = console()
    # a pipe gets it unwrapped, a terminal at its width, names whole
    out.print(keep_words_whole(_status_table(sub.id, rows), out.width))


def _status_table(title: str, rows: list[ReplicateStatus]) -> Any:
    """The replicates' rich table: Slurm state and evidence state, one row each; the last column is the
    run folder's name and the first line of its error if it has one."""
    from rich.table import Table

    table = Table(title=f"{title} ({len(rows)} replicates)")
    for column in ("replicate", "job", "Slurm state", "reason", "node", "evidence", "runs", "run / error"):
        table.add_column(column)
    for r in rows:
        s = r.slurm
        detail = (Path(r.run).name if r.run else "") + (f": {r.error.splitlines()[0]}" if r.error else "")
        table.add_row(str(r.replicate), s.job or "", s.state, s.reason or "", s.node or "", r.evidence, str(r.runs),
                      detail)
    return table


@task(name="collect", help={
    "submission": "the submission directory `invoke submit` printed",
    "tolerances": "tolerances YAML: compare's keys per host plus cross_host: {max_relative_range, max_cv}",
    "baseline": "a run directory or bundle to compare every replicate with (default: the first replicate)",
    "pubkey": "public key every replicate must be signed by (required; yours, never one inside the submission)",
    "baseline_pubkey": "public key of --baseline (default: --pubkey)",
    "key": "private key that signs the summary (default: the submission's --key, if it matches --pubkey)",
})
@user_errors
def collect_task(c, submission=None, pubkey=None, tolerances=None, baseline=None, baseline_pubkey=None, key=None):
    """Verify every replicate, compare each with the baseline, write the signed cross-host report.

    The last line is the new collect directory; exit 1 when a declared tolerance fails."""
    from ..cluster.collect import collect

    _required(submission, "submission", "collect")
    result = collect(Path(submission), pubkey=Path(pubkey) if pubkey else None, tolerances=Path(tolerances) if tolerances else None,
                     baseline=Path(baseline) if baseline else None,
                     baseline_pubkey=Path(baseline_pubkey) if baseline_pubkey else None,
                     key=Path(key) if key else None)
    from .output import print_markdown

    print_markdown((result.path / "summary.md").read_text(encoding="utf-8"))  # rendered on a terminal
    sys.stdout.write(f"{result.path}\n")  # never wrapped: the last line is the collect directory
    if result.passed is False:
        failures = result.summary.verdict.failures
        raise Exit(f"error: {len(failures)} tolerance failure(s); see {printable(str(result.path / 'summary.md'))}", code=1)

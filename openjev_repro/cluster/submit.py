"""`invoke submit`: one sbatch job array of replicate studies; `--resume` resubmits the
replicates that have no complete evidence (and are not queued or running)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import msgspec

from ..errors import EvidenceError, RecipeError, ReproError
from ..evidence.recipe import Recipe, load_recipe, parse_duration
from ..evidence.rundir import guard_output
from ..hashing import hash_file
from ..manifest.keys import PUBLIC_KEY_NAME, load_private_key
from ..printable import printable
from ..study.planner import REPRO_ROOT
from .jobscript import SbatchOptions, render_script, sbatch_argv
from .slurm import TERMINAL, job_states, sbatch
from .status import settle
from .submission import Submission

__all__ = ["MAX_REPLICATES", "resume", "submit"]

MAX_REPLICATES = 1000


def _public_pem(key_path: Path) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return load_private_key(key_path).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _check_options(replicates: int, options: SbatchOptions) -> None:
    if not 1 <= replicates <= MAX_REPLICATES:
        raise RecipeError(f"--replicates must be between 1 and {MAX_REPLICATES}, not {replicates}.")
    if options.time is not None:
        try:
            parse_duration(options.time)
        except ValueError as exc:
            raise RecipeError(f"--time: {exc}.") from None


def _check_gres(parsed: Recipe, recipe: Path, options: SbatchOptions) -> None:
    if parsed.controls.gpu is not None and not options.gres:
        raise RecipeError(f"{recipe} pins a GPU (controls.gpu): submit with --gres gpu:1 so Slurm allocates one "
                          "to each task (the task then measures on the allocated GPU).")


def _slurm_metadata(parsed: Recipe, options: SbatchOptions) -> tuple[SbatchOptions, dict[str, str]]:
    """The options with the reservation's timeout as --time when none was given, and the job's name and comment."""
    reservation = parsed.controls.reservation
    # Slurm metadata: one line, no control character (a NUL cannot even pass through argv)
    note = printable(" ".join((reservation.note if reservation is not None else "").split()))
    if options.time is None and reservation is not None:
        options = msgspec.structs.replace(options, time=reservation.timeout)
    study = parsed.study.id
    return options, {"job_name": (note or study)[:120], "comment": f"openjev-repro {study}" + (f": {note}" if note else "")}


def submit(*, recipe: Path, replicates: int, key: Path, out: Path, options: SbatchOptions) -> Submission:
    """Check everything that can be checked here, create the submission directory, sbatch the array."""
    _check_options(replicates, options)
    guard_output(out, directory=True)  # never inside a run (its files are evidence), never over a file
    recipe = recipe.resolve()
    parsed = load_recipe(recipe)
    public = _public_pem(key)  # the key must be readable here (and, on shared storage, on the nodes)
    _check_gres(parsed, recipe, options)
    options, names = _slurm_metadata(parsed, options)
    sub = Submission.create(out, parsed.study.id, {
        "recipe": str(recipe), "recipe_sha256": hash_file(recipe), "replicates": replicates,
        "key": str(key.resolve()), "pubkey": PUBLIC_KEY_NAME, "sbatch_options": options.to_dict(),
        **names, "repo": str(REPRO_ROOT), "python": sys.executable, "gpu_controls": parsed.controls.gpu is not None})
    (sub.path / PUBLIC_KEY_NAME).write_bytes(public)
    try:
        _sbatch_round(sub, sub.replicates)
    except (ReproError, OSError, ValueError):  # sbatch refused or could not run: nothing was queued
        shutil.rmtree(sub.path)  # leave no half-made submission behind
        raise
    return sub


def _sbatch_round(sub: Submission, replicates: list[int]) -> int:
    round_number = len(sub.rounds) + 1
    script = sub.script_path(round_number)
    record = sub.record
    opts = record.sbatch_options if isinstance(record.sbatch_options, SbatchOptions) else SbatchOptions()
    argv = sbatch_argv(opts, replicates=replicates, submission=sub.path, job_name=record.text("job_name"),
                       comment=record.text("comment"), workdir=Path(record.text("repo")))
    script.write_text(render_script(submission=sub.path, python=record.text("python"), argv=argv,
                                    round_number=round_number), encoding="utf-8")
    script.chmod(0o755)
    array_job_id = sbatch(argv, str(script))
    sub.add_round(array_job_id, replicates, script, argv)
    return array_job_id


def _resumable(sub: Submission) -> Submission:
    """The submission, once it holds every field a new sbatch round needs."""
    missing = sub.record.missing("recipe", "recipe_sha256", "job_name", "comment", "repo", "python", "sbatch_options")
    if missing:
        raise EvidenceError(f"{sub.path / 'submission.json'} is damaged (no {', '.join(missing)}); "
                            "only `invoke submit` writes it, so it cannot be resumed.")
    return sub


def resume(path: Path) -> tuple[Submission, list[int], dict[int, str]]:
    """Resubmit replicates without complete evidence; returns (submission, resubmitted, skipped with why)."""
    sub = _resumable(Submission.open(path))
    recipe = sub.record.text("recipe")
    if hash_file(recipe) != sub.record.recipe_sha256:
        raise RecipeError(f"{recipe} changed since it was submitted; a resumed replicate must run "
                          "the same recipe. Submit a new study instead.")
    states = job_states([r.array_job_id for r in sub.rounds], output_under=f"{sub.path}/")
    settle(sub, states)
    todo, skipped = [], {}
    for k in sub.replicates:
        if sub.complete_run(k) is not None:
            skipped[k] = "complete evidence"
            continue
        job = sub.latest_job(k)
        state = states.get((job, k)) if job is not None else None
        if state is not None and state.state not in TERMINAL:
            skipped[k] = f"job {job}_{k} is still {state.state}"
            continue
        todo.append(k)
    if todo:
        _sbatch_round(sub, todo)
    return sub, todo, skipped

"""Tasks of the study runner: verify-inputs, study."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Exit, task

from . import FAIL_ON_GATES_HELP, exit_on_failed_gates, user_errors

__all__ = ["study", "verify_inputs_task"]


@task(name="verify-inputs", help={
    "recipe": "recipe YAML whose declared inputs are checked",
    "inputs_root": "directory the recipe's input paths are relative to (default: the recipe's inputs.root)",
})
@user_errors
def verify_inputs_task(c, recipe, inputs_root=None):
    """SHA256 of every declared input; missing, changed and undeclared files as a table. Exit 1 on any mismatch."""
    from ..study.inputs import checks_table, verify_inputs
    from ..study.resolved import resolve_recipe
    from .output import console as make_console
    from .output import keep_words_whole

    console = make_console()
    study = resolve_recipe(recipe, inputs_root_override=inputs_root, apply_lock=False)
    root = study.root
    checks = verify_inputs(study.recipe, root, console=console)
    console.print(keep_words_whole(checks_table(checks, root), console.width))
    bad = [ch for ch in checks if ch.status != "ok"]
    if bad:
        raise Exit(f"error: {len(bad)} of {len(checks)} inputs do not match the recipe.", code=1)
    console.print(f"all {len(checks)} inputs match")


@task(help={
    "recipe": "recipe YAML to run (planned, then that plan run); or give --plan",
    "plan": "a plan file (`invoke plan --recipe R --out plan.json`, edited or not) to run exactly as written; "
            "the recipe it names must be unchanged",
    "out": "parent directory of the new run directory (default: runs/)",
    "runtime": "override every backend's runtime: local or docker",
    "inputs_root": "directory the recipe's input paths are relative to (default: the recipe's inputs.root)",
    "key": "Ed25519 private key (from `invoke keygen`) to sign the manifest; without it the manifest is unsigned",
    "allow_busy": "start even if the pinned GPU has compute processes (recorded in the manifest)",
    "allow_environment_drift": "measure even when a backend reports another environment than the recipe "
                               "declares (packages, kernels, dtype, weights); every difference is recorded "
                               "in the manifest and shown at the top of the report",
    "gpu_uuid": "run on this GPU instead of the recipe's controls.gpu, without editing the recipe "
                "(recorded as gpu_override in host.json and the manifest; see docs/rerun-h200.md)",
    "gpu_index": "with --gpu-uuid: the GPU's index on this host (default: looked up from the UUID)",
    "gpu_source": "with --gpu-uuid: who chose that GPU, recorded as gpu_override.source (default: cli; "
                  "a Slurm task passes slurm)",
    "fail_on_gates": FAIL_ON_GATES_HELP,
})
@user_errors
def study(c, recipe=None, plan=None, out="runs", runtime=None, inputs_root=None, key=None, allow_busy=False, gpu_uuid=None,
          gpu_index=None, gpu_source=None, allow_environment_drift=False, fail_on_gates=False):
    """Run a recipe's study (or a plan file) end to end; the last line printed is the run directory."""
    from ..orchestrator.progress import ConsoleProgress
    from ..orchestrator.runner import StudyOptions, plan_study, run_study
    from .output import console

    override = _gpu_override(gpu_uuid, gpu_index, gpu_source)
    planned = _plan_file(recipe, plan, runtime, inputs_root)
    opts = StudyOptions(recipe_path=planned.study.path if planned else Path(recipe), out_dir=Path(out), runtime=runtime,
                        inputs_root=Path(inputs_root) if inputs_root else None,
                        key_path=Path(key) if key else None, allow_busy=allow_busy, gpu_override=override,
                        progress=ConsoleProgress(console(stderr=True)), allow_environment_drift=allow_environment_drift)
    run = run_study(opts, planned or plan_study(opts))  # --recipe: planned here, then that plan runs
    sys.stdout.write(f"{run.path}\n")
    if fail_on_gates:
        exit_on_failed_gates(run.path / "summary.json", str(run.path))


def _plan_file(recipe, plan, runtime, inputs_root):
    """The plan file given with --plan, read and checked against its recipe; None with --recipe."""
    from ..orchestrator.runner import read_plan

    if (recipe is None) == (plan is None):
        raise Exit("error: give either --recipe (plan it, then run that plan) or --plan (run a plan file).", code=1)
    if plan is None:
        return None
    if runtime is not None or inputs_root is not None:
        raise Exit("error: --runtime and --inputs-root are fixed by the plan file; make the plan with them.", code=1)
    return read_plan(Path(plan))


def _gpu_override(gpu_uuid, gpu_index, gpu_source):
    """--gpu-uuid (with --gpu-index, --gpu-source) as a GpuOverride; None without --gpu-uuid."""
    from ..host.override import GpuOverride

    if gpu_index is not None and gpu_uuid is None:
        raise Exit("error: --gpu-index needs --gpu-uuid (the UUID is what is checked and reserved).", code=1)
    if gpu_source is not None and gpu_uuid is None:
        raise Exit("error: --gpu-source needs --gpu-uuid (it says who chose that GPU).", code=1)
    try:
        index = int(gpu_index) if gpu_index is not None else None
    except ValueError:
        raise Exit(f"error: --gpu-index must be a whole number, not {gpu_index!r}.", code=1) from None
    source = "cli" if gpu_source is None else gpu_source
    return GpuOverride(uuid=gpu_uuid, index=index, source=source) if gpu_uuid is not None else None

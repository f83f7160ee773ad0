"""Tasks of the study runner: verify-inputs, study."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Exit, task

from . import user_errors

__all__ = ["verify_inputs_task", "study"]


@task(name="verify-inputs", help={
    "recipe": "recipe YAML whose declared inputs are checked",
    "inputs_root": "directory the recipe's input paths are relative to (default: the recipe's inputs.root)",
})
@user_errors
def verify_inputs_task(c, recipe, inputs_root=None):
    """SHA256 of every declared input; missing, changed and undeclared files as a table. Exit 1 on any mismatch."""
    from ..inputs import checks_table, verify_inputs
    from ..recipe import inputs_root as resolve_root, load_recipe
    from .output import console as make_console

    console = make_console()
    parsed = load_recipe(recipe)
    root = resolve_root(recipe, parsed, inputs_root)
    checks = verify_inputs(parsed, root, console=console)
    console.print(checks_table(checks, root))
    bad = [ch for ch in checks if ch.status != "ok"]
    if bad:
        raise Exit(f"error: {len(bad)} of {len(checks)} inputs do not match the recipe.", code=1)
    console.print(f"all {len(checks)} inputs match")


@task(help={
    "recipe": "recipe YAML to run",
    "out": "parent directory of the new run directory (default: runs/)",
    "runtime": "override every backend's runtime: local or docker",
    "inputs_root": "directory the recipe's input paths are relative to (default: the recipe's inputs.root)",
    "key": "Ed25519 private key (from `invoke keygen`) to sign the manifest; without it the manifest is unsigned",
    "allow_busy": "start even if the pinned GPU has compute processes (recorded in the manifest)",
})
@user_errors
def study(c, recipe, out="runs", runtime=None, inputs_root=None, key=None, allow_busy=False):
    """Run a recipe's study end to end; the last line printed is the run directory."""
    from ..study import StudyOptions, run_study
    from .output import console

    opts = StudyOptions(recipe_path=Path(recipe), out_dir=Path(out), runtime=runtime,
                        inputs_root=Path(inputs_root) if inputs_root else None,
                        key_path=Path(key) if key else None, allow_busy=allow_busy, console=console(stderr=True))
    run = run_study(opts)
    sys.stdout.write(f"{run.path}\n")

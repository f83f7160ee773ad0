"""Tasks of what actually ran (issue 39): the kernel caches a run produced, packed to pin them."""

from __future__ import annotations

from pathlib import Path

from invoke import task

from . import user_errors

__all__ = ["kernel_cache"]


@task(help={"run": "a run directory whose backend declared kernel_caches (its caches lie beside it, "
                   "in RUN.kernel-caches/)",
            "backend": "the backend whose caches to pack",
            "out": "the archive to write (.tar.xz; never overwritten)",
            "kind": "pack only this kind: triton or inductor (default: every kind the backend had)",
            "pin": "a recipe whose `kernel_caches.pinned` entry names OUT: its sha256 is rewritten in place"})
@user_errors
def kernel_cache(c, run, backend, out, kind=None, pin=None):
    """Pack the kernel caches a run's backend used into one deterministic archive, to pin in a recipe.

    Example: invoke kernel-cache --run runs/demo-… --backend reference-fast --out caches/fast.tar.xz
    """
    from ..errors import RecipeError
    from ..evidence.rundir import RunDir
    from ..study.kernel_caches import KIND_ENV, pack_caches, pin_in_recipe, run_caches

    if kind is not None and kind not in KIND_ENV:
        raise RecipeError(f"--kind {kind!r}: give triton or inductor.")
    folders = run_caches(RunDir.open(Path(run)), backend, [kind] if kind else None)
    sha256 = pack_caches(folders, Path(out))
    size = Path(out).stat().st_size
    print(f"{out}: {', '.join(sorted(folders))} caches of {backend}, {size} bytes\nsha256 {sha256}")
    print(f"recipe: kernel_caches: {{kinds: [{', '.join(sorted(folders))}], "
          f"pinned: [{{archive: <OUT under inputs.root>, sha256: {sha256}}}]}}")
    if pin:
        old = pin_in_recipe(Path(pin), Path(out), sha256)
        print(f"{pin}: sha256 {old[:12]}… → {sha256[:12]}… for {out}")

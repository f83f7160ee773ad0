"""Tasks of the manifest area: keys, signing, environment capture."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import task

from . import metavars, user_errors

__all__ = ["environment", "keygen", "sign"]


@task(help={"out": "directory for openjev-repro.key (mode 0600) and openjev-repro.pub; never overwritten"})
@user_errors
def keygen(c, out):
    """Create an Ed25519 signing key pair; prints the keyid (sha256 of the raw public key)."""
    from ..evidence.rundir import enclosing_run, guard_output
    from ..manifest.keys import generate_keypair

    if enclosing_run(Path(out)) is not None:
        guard_output(Path(out), directory=True)  # refuses it: keys never go into a run (its files are evidence)
    private, public, kid = generate_keypair(Path(out))
    print(f"private key: {private} (keep it secret; mode 0600)\npublic key:  {public}\nkeyid:       {kid}")


@task(help={"run": "a complete run directory without a manifest",
            "key": "private key from `invoke keygen`; omit to write an UNSIGNED manifest"})
@user_errors
def sign(c, run, key=None):
    """Write manifest.dsse.json for a complete run (the runner does this itself at the end of a study)."""
    from ..manifest.statement import write_manifest

    path = write_manifest(Path(run), key_path=Path(key) if key else None)
    print(f"{'signed' if key else 'UNSIGNED'} manifest: {path}")


@task(help={"python": "name=/path/to/python of a backend environment to probe; repeatable",
            "recipe": "recipe file whose sha256 to record",
            "tree_digest": "print only the tree digest of this directory (what a recipe's "
                           "environment.triton_cache.sha256 declares) as JSON"}, iterable=["python"])
@user_errors
@metavars(python="NAME=PATH")
def environment(c, python=None, recipe=None, tree_digest=None):
    """Print the environment capture (host, GPUs, package versions, git, source digest) as JSON."""
    from ..errors import RecipeError
    from ..manifest.environment import collect_environment

    if tree_digest:
        from ..hashing import tree_digest as digest_of

        if not Path(tree_digest).is_dir():
            raise RecipeError(f"--tree-digest {tree_digest}: not a directory.")
        print(json.dumps(digest_of(tree_digest), indent=2, sort_keys=True))
        return

    if recipe:
        from ..evidence.recipe import load_recipe

        load_recipe(recipe)  # a recipe, not just any file, is what gets recorded
    pythons = {}
    for item in python or []:
        name, sep, path = item.partition("=")
        if not sep:
            raise RecipeError(f"--python {item!r} is not name=/path/to/python.")
        pythons[name] = path
    env = collect_environment(backends_python=pythons, recipe_path=Path(recipe) if recipe else None)
    print(json.dumps(env.to_json(), indent=2, sort_keys=True))

"""Tasks of the manifest area: keys, signing, environment capture."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import task

from . import user_errors

__all__ = ["environment", "keygen", "sign"]


@task(help={"out": "directory for openjev-repro.key (mode 0600) and openjev-repro.pub; never overwritten"})
@user_errors
def keygen(c, out):
    """Create an Ed25519 signing key pair; prints the keyid (sha256 of the raw public key)."""
    from ..manifest.keys import generate_keypair

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
            "recipe": "recipe file whose sha256 to record"}, iterable=["python"])
@user_errors
def environment(c, python=None, recipe=None):
    """Print the environment capture (host, GPUs, package versions, git) as JSON."""
    from ..errors import RecipeError
    from ..manifest.environment import collect_environment

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
    print(json.dumps(env, indent=2, sort_keys=True))

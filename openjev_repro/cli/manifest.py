"""Tasks of the manifest area: keys, signing, environment capture."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import task

from ..printable import printable
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


@task(help={"run": "a complete run directory without a manifest, or with the UNSIGNED one a study without --key wrote",
            "key": "private key from `invoke keygen`; omit to write an UNSIGNED manifest"})
@user_errors
def sign(c, run, key=None):
    """Write manifest.dsse.json for a complete run (the runner does this itself at the end of a study).

    A run that holds an UNSIGNED manifest (written by a study run without a key) is signed with the
    key given once every check of it passes: its files are still what that manifest lists."""
    from ..evidence.rundir import ENVELOPE_NAME
    from ..manifest.run_manifest import read_statement, write_manifest

    path = Path(run)
    envelope = path / ENVELOPE_NAME
    if key and envelope.is_file() and not read_statement(envelope)[0].signatures:  # UNSIGNED: sign over it
        _sign_over_unsigned(path, Path(key))
    else:
        write_manifest(path, key_path=Path(key) if key else None)
    print(f"{'signed' if key else 'UNSIGNED'} manifest: {path / ENVELOPE_NAME}")


def _sign_over_unsigned(run: Path, key: Path) -> None:
    """Replace the UNSIGNED manifest by a signed one, only when the run still verifies against it; the
    unsigned one is put back if signing fails, so the run never ends without a manifest."""
    from ..audit.verify import verify_dir
    from ..errors import VerificationError
    from ..evidence.files import write_bytes_atomic
    from ..evidence.rundir import ENVELOPE_NAME
    from ..manifest.keys import load_private_key
    from ..manifest.run_manifest import write_manifest

    load_private_key(key)  # a bad key is refused before anything moves
    failed = [c for c in verify_dir(run, allow_unsigned=True) if c.passed is False]
    if failed:
        raise VerificationError(f"{printable(str(run))} does not match its UNSIGNED manifest ({failed[0].name}: "
                                f"{printable(failed[0].detail)}); it is not signed.")
    unsigned = run / ENVELOPE_NAME
    kept = unsigned.read_bytes()  # in memory, not beside it: every file in the run is a subject of the statement
    unsigned.unlink()
    try:
        write_manifest(run, key_path=key)
    except BaseException:
        write_bytes_atomic(unsigned, kept)
        raise


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

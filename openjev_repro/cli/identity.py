"""Tasks of what actually ran (issue 39): the kernel caches a run produced, packed to pin them."""

from __future__ import annotations

from pathlib import Path

from invoke import task

from . import user_errors

__all__ = ["kernel_cache", "sbom", "write_image_records"]


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


@task(help={"backend": "the image whose Python environment to describe: hf, fast, native or reference",
            "offline": "the image built from the Debian base (images/<backend>/offline/; reference has only this)",
            "out": "write the document here (never overwritten) instead of printing it"})
@user_errors
def sbom(c, backend, offline=False, out=None):
    """A CycloneDX 1.6 SBOM of an image's Python environment, from its lock (no docker), validated.

    Example: invoke sbom --backend hf --out hf.cdx.json
    """
    from ..evidence.files import write_bytes_atomic
    from ..evidence.rundir import guard_output
    from ..images import load_spec
    from ..images.provenance import python_sbom, validate_sbom

    text = python_sbom(load_spec(backend, offline))
    validate_sbom(text)
    if out is None:
        print(text, end="")
        return
    write_bytes_atomic(guard_output(Path(out)), text.encode())
    print(f"{out}: CycloneDX 1.6, valid")


def write_image_records(spec, record: dict, key: str | None, parameters: dict) -> None:
    """After `invoke build`: the image's SBOM and SLSA provenance beside its build record (signed with `key`)."""
    import msgspec

    from ..evidence.files import write_bytes_atomic
    from ..hashing import hash_file
    from ..images.build import build_args
    from ..images.provenance import (
        BuildRecord,
        image_sbom,
        provenance_path,
        provenance_statement,
        sbom_path,
        statement_bytes,
        validate_sbom,
    )
    from ..manifest.dsse import envelope_bytes, make_envelope
    from ..manifest.keys import load_private_key

    built = msgspec.convert(record, BuildRecord)
    text = image_sbom(spec, built)
    validate_sbom(text)
    write_bytes_atomic(sbom_path(spec), text.encode())
    statement = provenance_statement(spec, built, build_args=build_args(spec), parameters=parameters,
                                     sbom_sha256=hash_file(sbom_path(spec)))
    if key:
        envelope = make_envelope(statement_bytes(statement), load_private_key(Path(key)),
                                 payload_type="application/vnd.in-toto+json")
        write_bytes_atomic(provenance_path(spec, signed=True), envelope_bytes(envelope))
    else:
        write_bytes_atomic(provenance_path(spec, signed=False), statement_bytes(statement))
    print(f"SBOM {sbom_path(spec)}; SLSA provenance {provenance_path(spec, bool(key))}"
          f"{' (signed)' if key else ' (unsigned: no --key)'}")

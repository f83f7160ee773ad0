"""Kernel caches as inputs of a study (issue 39): what a compiled backend computes depends on the
kernels its autotuners chose, and those choices live in Triton's cache (FLA's autotune results too)
and in Inductor's (torch.compile's graphs, kernels and `.best_config` files).

A recipe backend declares `kernel_caches: {kinds: [triton, inductor], pinned: [{archive, sha256}]}`
(evidence/recipe.py `KernelCaches`). Before the backend starts, the study makes one fresh directory
per kind beside the run, `<run>.kernel-caches/<backend>/<kind>/` (beside, not in: a cache of thousands
of files is no evidence to sign), unpacks the pinned archives into them (their sha256 checked first,
every member checked before anything is written), and points the backend at them through
TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR. After the backend stopped it digests them again.
`kernel_caches.json` in the run records, per backend and kind, the variable, the archive and its
sha256, and the tree digest before and after. A pinned cache that changed means some kernel was
compiled or autotuned anew on this host: an environment difference, which stops the study unless
--allow-environment-drift (then it is recorded, and compare names it). Its record then lists which files
were added, removed or rewritten against the archive (`FileChanges`), so the next run can be told what
moved: on 2026-12-04 a pinned fast-eager Triton cache kept its 887 files on a second H200 but not their
bytes, while every autotune choice and all 325 answers stayed bit-identical to the first host. The cause
was in the archive: Triton's group files named the producing run's folder (kernel_cache_files.py), so a
cache unpacked elsewhere missed every kernel. Packing now writes group files location-free, unpacking
points them at the folder they land in, and every digest and comparison counts them location-free.

`pack_caches` writes the caches a run produced as one archive with deterministic bytes (members
sorted, mtimes 0, owners 0, modes normalised, xz), so that `invoke kernel-cache` can hand them to the
next recipe's `pinned`.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

import msgspec

from ..errors import EvidenceError, InputMismatch, RecipeError
from ..evidence.files import write_bytes_atomic
from ..evidence.recipe import Backend, KernelCachePin
from ..evidence.rundir import RunDir
from ..hashing import hash_file
from ..kernel_cache_files import (
    MAX_GROUP_BYTES,
    cache_digest,
    cache_file_sha256,
    is_group_file,
    relative_form,
    relocated,
)

__all__ = ["KIND_ENV", "RECORD_FILE", "CacheRecord", "FileChanges", "KernelCacheChanged", "KernelCachesRecord", "caches_dir",
           "close_caches", "open_caches", "pack_caches", "pin_in_recipe", "refuse_changed", "run_caches",
           "unpack_archive"]

Kind = Literal["triton", "inductor"]
EnvName = Literal["TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"]
KIND_ENV: dict[str, EnvName] = {"triton": "TRITON_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR"}
RECORD_FILE = "kernel_caches.json"

MAX_MEMBERS = 500_000  # a real Triton cache of the 27B study holds ~1,500 files
MAX_BYTES = 16 * 2**30  # unpacked
XZ_PRESET = 6

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


class KernelCacheChanged(InputMismatch):
    """A pinned kernel cache was written to while the backend ran (a kernel compiled or tuned anew)."""


class TreeDigest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """kernel_cache_files.cache_digest of a cache directory: sha256 over its files' `sha256sum` lines, and
    their count. `paths: relative` (since 2026-12-05): Triton's group files were hashed location-free; a
    record without it hashed them as written, with the absolute paths of the folder they lay in."""

    sha256: Sha256
    files: Count
    paths: Literal["relative"] | msgspec.UnsetType = msgspec.UNSET

    @classmethod
    def of(cls, directory: Path) -> TreeDigest:
        found = cache_digest(directory)
        return cls(sha256=found["sha256"], files=found["files"], paths="relative")


ListedNames = Annotated[tuple[Annotated[str, msgspec.Meta(max_length=4096)], ...], msgspec.Meta(max_length=20)]


class FileChanges(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a pinned cache's files after the run differ from its archive's: counts, and the first names of each."""

    added: Count
    removed: Count
    rewritten: Count
    names: ListedNames  # `<kind>/<path>`, rewritten first, then added, then removed (the first 20)

    LISTED = 20

    @classmethod
    def between(cls, archived: dict[str, str], now: dict[str, str]) -> FileChanges:
        """`archived` and `now`: relative path -> sha256 of one kind's files."""
        rewritten = sorted(p for p in archived.keys() & now.keys() if archived[p] != now[p])
        added, removed = sorted(now.keys() - archived.keys()), sorted(archived.keys() - now.keys())
        return cls(added=len(added), removed=len(removed), rewritten=len(rewritten),
                   names=tuple([*rewritten, *added, *removed][:cls.LISTED]))

    def phrase(self) -> str:
        shown = ", ".join(self.names[:3]) + (" …" if len(self.names) > 3 else "")
        return f"{self.rewritten} rewritten, {self.added} added, {self.removed} removed: {shown}"


class CacheRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One kernel cache of one backend: where it was, what it was pinned to, its digest before and after."""

    kind: Kind
    env: EnvName
    directory: Annotated[str, msgspec.Meta(max_length=4096)]  # relative to the run's parent folder
    archive: Annotated[str, msgspec.Meta(max_length=4096)] | msgspec.UnsetType = msgspec.UNSET
    archive_sha256: Sha256 | msgspec.UnsetType = msgspec.UNSET
    before: TreeDigest
    after: TreeDigest | msgspec.UnsetType = msgspec.UNSET
    changes: FileChanges | msgspec.UnsetType = msgspec.UNSET  # a pinned cache that changed: which files

    @property
    def pinned(self) -> bool:
        return self.archive is not msgspec.UNSET

    @property
    def changed(self) -> bool | None:
        """None until the backend stopped; then whether the tree differs from what it started with."""
        return None if isinstance(self.after, msgspec.UnsetType) else self.after.sha256 != self.before.sha256

    def difference(self, backend: str) -> str | None:
        """The environment difference a changed pinned cache is, in one phrase (None when there is none)."""
        if not self.pinned or not self.changed or isinstance(self.after, msgspec.UnsetType):
            return None
        which = "" if isinstance(self.changes, msgspec.UnsetType) else f"; {self.changes.phrase()}"
        return (f"{backend}: the pinned {self.kind} cache changed while it ran ({self.archive}: "
                f"{self.before.files} files {self.before.sha256[:12]} before, {self.after.files} files "
                f"{self.after.sha256[:12]} after{which}): some kernel was compiled or autotuned anew on this host")

    def closed(self, parent: Path, root: Path) -> CacheRecord:
        """This record once the backend stopped: the digest after, and for a pinned cache that changed, which
        files (against the archive under `root`, the recipe's root)."""
        folder = parent / self.directory
        closed = msgspec.structs.replace(self, after=TreeDigest.of(folder))
        if not closed.pinned or not closed.changed or isinstance(self.archive, msgspec.UnsetType):
            return closed
        now = {p.relative_to(folder).as_posix(): cache_file_sha256(p) for p in folder.rglob("*")
               if p.is_file() and not p.is_symlink() and "__pycache__" not in p.relative_to(folder).parts}
        return msgspec.structs.replace(closed, changes=FileChanges.between(
            archived_files(root / self.archive, self.kind), now))


class KernelCachesRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """kernel_caches.json: per backend (in start order) its caches."""

    format_version: Literal[1] = 1
    backends: dict[Annotated[str, msgspec.Meta(max_length=200)], tuple[CacheRecord, ...]] = {}

    @classmethod
    def read(cls, run: RunDir) -> KernelCachesRecord | None:
        """The run's record; None when the run has none (no backend declared kernel caches)."""
        path = run.file(RECORD_FILE)
        if not path.is_file():
            return None
        try:
            return msgspec.json.decode(path.read_bytes(), type=cls)
        except msgspec.ValidationError as exc:
            raise EvidenceError(f"{path}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise EvidenceError(f"{path} is not JSON: {exc}") from None

    def write(self, run: RunDir) -> None:
        data = msgspec.json.format(msgspec.json.encode(msgspec.to_builtins(self, order="sorted")), indent=2)
        write_bytes_atomic(run.file(RECORD_FILE), data + b"\n")

    def with_backend(self, name: str, caches: tuple[CacheRecord, ...]) -> KernelCachesRecord:
        return msgspec.structs.replace(self, backends={**self.backends, name: caches})

    def folders(self, name: str, parent: Path, kinds: list[str] | None) -> dict[str, Path]:
        """kind -> folder (under `parent`, the run's parent folder) of backend `name`'s caches of `kinds`."""
        if name not in self.backends:
            raise RecipeError(f"The run records no kernel caches for backend {name!r} (backends with kernel "
                              f"caches: {', '.join(sorted(self.backends)) or 'none'}).")
        found: dict[str, Path] = {c.kind: parent / c.directory for c in self.backends[name]
                                  if c.kind in (kinds or KIND_ENV)}
        missing = sorted(set(kinds or ()) - set(found))
        if missing:
            raise RecipeError(f"Backend {name} had no {', '.join(missing)} cache in that run.")
        return found

    def differences(self, name: str) -> list[str]:
        return [d for c in self.backends.get(name, ()) if (d := c.difference(name)) is not None]


def caches_dir(run_path: Path) -> Path:
    """Where a run's kernel caches live: beside the run directory, never inside its evidence."""
    return run_path.parent / f"{run_path.name}.kernel-caches"


# --- archives -----------------------------------------------------------------------------


def _checked_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """Every member, checked before anything is written: regular files and folders under a kind's folder."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        path = PurePosixPath(member.name)
        if len(members) >= MAX_MEMBERS:
            raise InputMismatch(f"{archive}: more than {MAX_MEMBERS} members; not a kernel cache archive.")
        if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] not in KIND_ENV:
            raise InputMismatch(f"{archive}: member {member.name!r} is not under triton/ or inductor/; "
                                "not an archive of `invoke kernel-cache`.")
        if not (member.isreg() or member.isdir()):
            raise InputMismatch(f"{archive}: member {member.name!r} is a link or device; only files and folders.")
        total += member.size
        if total > MAX_BYTES:
            raise InputMismatch(f"{archive}: unpacks to more than {MAX_BYTES} bytes; not a kernel cache archive.")
        members.append(member)
    return members


def unpack_archive(archive: Path, sha256: str, destination: Path) -> set[str]:
    """Unpack a pinned archive into `destination` (its sha256 checked first); return the kinds it held."""
    if not archive.is_file() or archive.is_symlink():
        raise InputMismatch(f"The kernel cache archive {archive} is not a file.")
    found = hash_file(archive)
    if found != sha256:
        raise InputMismatch(f"The kernel cache archive {archive} has sha256 {found}, the recipe pins {sha256}; "
                            "it is not the pinned archive.")
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _checked_members(tar, archive)
            tar.extractall(destination, members=members, filter="data")
        for member in members:  # Triton's group files, pointed at where their kernels now are
            if member.isreg() and is_group_file(member.name) and member.size <= MAX_GROUP_BYTES:
                path = destination / member.name
                write_bytes_atomic(path, relocated(path.read_bytes(), path.parent))
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as exc:
        raise InputMismatch(f"The kernel cache archive {archive} cannot be read: {exc}.") from None
    return {PurePosixPath(m.name).parts[0] for m in members}


def archived_files(archive: Path, kind: str) -> dict[str, str]:
    """Path under the kind's folder -> sha256 of every regular file of that kind in an archive, group files
    in their relative form (an archive that cannot be read any more: {}, every file then counts as added)."""
    found: dict[str, str] = {}
    prefix = f"{kind}/"
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isreg() and member.name.startswith(prefix) else None
                if handle is not None:
                    data = handle.read()
                    data = relative_form(data) if is_group_file(member.name) else data
                    found[member.name.removeprefix(prefix)] = hashlib.sha256(data).hexdigest()
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError):
        return {}
    return found


def _entries(directory: Path, kind: str) -> list[tuple[str, Path]]:
    """(member name, path) of a cache folder, sorted; links, sockets and __pycache__ are left out."""
    found = [(kind, directory)]
    for path in sorted(directory.rglob("*")):
        if "__pycache__" in path.relative_to(directory).parts or path.is_symlink():
            continue
        if path.is_dir() or path.is_file():
            found.append((f"{kind}/{path.relative_to(directory).as_posix()}", path))
    return sorted(found)


def pack_caches(folders: dict[str, Path], out: Path) -> str:
    """One deterministic .tar.xz of the given kind -> folder caches at `out` (never overwritten); its sha256.
    Group files go in location-free (`relative_form`), so the same cache packs to the same bytes anywhere."""
    if out.exists() or out.is_symlink():
        raise RecipeError(f"{out} exists already; give a new --out (an archive is never overwritten).")
    buffer = io.BytesIO()
    with lzma.LZMAFile(buffer, "wb", format=lzma.FORMAT_XZ, preset=XZ_PRESET) as xz, \
            tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind in sorted(folders):
            for name, path in _entries(folders[kind], kind):  # no owner, no time: the same bytes on every host
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if path.is_dir():
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    continue
                data = path.read_bytes()
                data = relative_form(data) if is_group_file(name) else data
                info.size, info.mode = len(data), 0o755 if path.stat().st_mode & 0o100 else 0o644
                tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, buffer.getvalue())
    return hash_file(out)


# --- the study's hooks (orchestrator/runner.py) ---------------------------------------------


def _fill(backend: Backend, pins: list[KernelCachePin], root: Path, folder: Path) -> dict[str, KernelCachePin]:
    """Unpack each pin into the backend's folder; kind -> the pin that filled it."""
    filled: dict[str, KernelCachePin] = {}
    declared = set(backend.kernel_caches.kinds) if backend.kernel_caches else set()
    for pin in pins:
        kinds = unpack_archive(root / pin.archive, pin.sha256, folder)
        extra, twice = kinds - declared, kinds & set(filled)
        if extra or twice:
            what = f"holds {', '.join(sorted(extra))}, not in its kinds" if extra else \
                f"holds {', '.join(sorted(twice))}, which another pinned archive holds too"
            raise InputMismatch(f"Backend {backend.name}: the kernel cache archive {pin.archive} {what}.")
        filled.update(dict.fromkeys(kinds, pin))
    return filled


def open_caches(run: RunDir, backend: Backend, root: Path, runtime: str) -> dict[str, str]:
    """Before a launched backend starts: its fresh cache folders, filled from the pinned archives and
    recorded; the environment variables that point it at them ({} without `kernel_caches`)."""
    spec = backend.kernel_caches
    if spec is None:
        return {}
    if runtime != "local":
        raise RecipeError(f"Backend {backend.name}: kernel_caches need the local runtime (a {runtime} backend "
                          "cannot write the study's cache folders).")
    folder = caches_dir(run.path) / backend.name
    for kind in spec.kinds:
        (folder / kind).mkdir(parents=True, exist_ok=False)
    filled = _fill(backend, spec.pinned, root, folder)
    records = []  # each cache as the backend gets it: the folder's digest before it starts, and its pin if any
    for kind in spec.kinds:
        record = CacheRecord(kind=kind, env=KIND_ENV[kind], before=TreeDigest.of(folder / kind),
                             directory=(folder / kind).relative_to(run.path.parent).as_posix())
        pin = filled.get(kind)
        records.append(record if pin is None else
                       msgspec.structs.replace(record, archive=pin.archive, archive_sha256=pin.sha256))
    (KernelCachesRecord.read(run) or KernelCachesRecord()).with_backend(backend.name, tuple(records)).write(run)
    return {KIND_ENV[kind]: str(folder / kind) for kind in spec.kinds}


def close_caches(run: RunDir, name: str, root: Path) -> KernelCachesRecord | None:
    """After the backend stopped: each of its caches digested again and recorded (`root`: the recipe's root,
    where the pinned archives are)."""
    record = KernelCachesRecord.read(run)
    if record is None or name not in record.backends:
        return record
    caches = tuple(c.closed(run.path.parent, root) for c in record.backends[name])
    record = record.with_backend(name, caches)
    record.write(run)
    return record


def refuse_changed(run: RunDir, name: str, allow_drift: bool) -> list[str]:
    """The differences of a backend's pinned caches that changed; raise unless drift is allowed."""
    record = KernelCachesRecord.read(run)
    found = record.differences(name) if record is not None else []
    if found and not allow_drift:
        raise KernelCacheChanged("Environment drift: " + "; ".join(found) + ". Pin caches made on a host like "
                                 "this one, or pass --allow-environment-drift to measure anyway (it is recorded).")
    return found


# --- the user's side: what a run produced, packed and pinned (`invoke kernel-cache`) ----------


def run_caches(run: RunDir, name: str, kinds: list[str] | None = None) -> dict[str, Path]:
    """kind -> folder of the caches backend `name` used in a run (those of `kinds`, or all)."""
    found = (KernelCachesRecord.read(run) or KernelCachesRecord()).folders(name, run.path.parent, kinds)
    gone = [str(p) for p in found.values() if not p.is_dir() or p.is_symlink()]
    if gone:
        raise RecipeError(f"The kernel cache folder {gone[0]} of that run is gone (caches live beside the run, "
                          f"in {caches_dir(run.path).name}).")
    return found


def pin_in_recipe(recipe_path: Path, archive: Path, sha256: str) -> str:
    """Write `sha256` into the one `pinned` entry of the recipe whose archive is `archive`; its old digest.

    Only that line's digest changes (the recipe's comments and layout stay); the result is loaded
    again, and a recipe that would not load is left untouched."""
    from ..evidence.recipe import inputs_root, load_recipe, parse_recipe

    recipe = load_recipe(recipe_path)
    root = inputs_root(recipe_path, recipe)
    pins = [p for b in recipe.backends if b.kernel_caches for p in b.kernel_caches.pinned
            if (root / p.archive).resolve() == archive.resolve()]
    if len(pins) != 1:
        raise RecipeError(f"{recipe_path} pins {len(pins)} kernel cache archives at {archive} (under its inputs "
                          f"root {root}); --pin needs exactly one `pinned` entry naming it.")
    text = Path(recipe_path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if pins[0].archive in line and pins[0].sha256 in line]
    if len(hits) != 1:
        raise RecipeError(f"{recipe_path}: --pin needs the archive and its sha256 on one line, as "
                          f"`- {{archive: {pins[0].archive}, sha256: ...}}`; found {len(hits)} such lines.")
    lines[hits[0]] = lines[hits[0]].replace(pins[0].sha256, sha256)
    new = "".join(lines)
    parse_recipe(new, str(recipe_path))
    write_bytes_atomic(Path(recipe_path), new.encode("utf-8"))
    return pins[0].sha256

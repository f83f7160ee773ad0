"""Reading the other project's manifest: which files it lists, with which digests, and checking them.

The system1-omni layout (e.g. `benchmarks/gdn/artifacts/20261003/`): a `manifest.json` at the
root whose `files` maps each path (possibly in a subfolder: `e2e/`, `kernel/`, `flashinfer/`)
to a digest string or to an object `{sha256, bytes, source, source_sha256?, normalization?}`.
Every listed file that is present is checked (bytes, then sha256); any mismatch, or a present
file the manifest does not list, is an error and nothing is written. Listed files that are
absent (a partial download) are recorded as "not present, not verified".
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ...errors import EvidenceError, InputMismatch
from ...evidence.decoding import UNSET, UnsetType, decode
from ...evidence.files import read_json
from ...hashing import hash_file
from .arm_rows import FILE_RE

__all__ = ["MANIFEST_NAME", "CheckedSource", "ManifestEntry", "SourceManifest", "evidence_folder", "file_state", "locate_source", "read_finite_json",
           "read_source_manifest", "verify_source"]

MANIFEST_NAME = "manifest.json"
_UPWARD = 3  # how many folders above --src may hold manifest.json
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


class ManifestEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One listed file of their manifest.json: its sha256 (a bare digest string lists only that) and, where
    published, its size, source, source's sha256 and normalization note (their other keys left alone)."""

    sha256: Annotated[str, Meta(pattern=_HEX64.pattern)]
    size: Annotated[int, Meta(ge=0, le=2**63 - 1)] | UnsetType = msgspec.field(default=UNSET, name="bytes")
    source: str | UnsetType = UNSET
    source_sha256: Annotated[str, Meta(pattern=_HEX64.pattern)] | UnsetType = UNSET
    normalization: str | UnsetType = UNSET

    def state(self, path: Path, name: str) -> str:
        """"" when the listed file is present with its bytes and sha256, "absent", or the problem."""
        if path.is_symlink():
            return f"{name}: is a symbolic link, not a file"
        if not path.exists():
            return "absent"
        if not path.is_file():
            return f"{name}: is not a regular file"
        if self.size is not UNSET and path.stat().st_size != self.size:
            return f"{name}: {path.stat().st_size} bytes, the manifest says {self.size}"
        got = hash_file(path)
        if got != self.sha256.lower():
            return f"{name}: sha256 {got[:12]}… differs from the manifest's {self.sha256.lower()[:12]}…"
        return ""


@dataclass(frozen=True)
class SourceManifest:
    root: Path  # the folder holding manifest.json
    entries: dict[str, ManifestEntry]  # path -> its entry, decoded
    published: dict[str, dict[str, Any]]  # path -> its entry as published (sha256 in lower case), for import.json
    meta: dict[str, Any] = field(default_factory=dict)  # every other top-level field


def _check_path(path: Any, where: str) -> str:
    """A listed file name: a normalised relative POSIX path inside the folder, not manifest.json."""
    if not isinstance(path, str) or not path or "\\" in path:
        raise InputMismatch(f"{where}: file name {path!r} is not a relative POSIX path.")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or str(pure) != path or path == MANIFEST_NAME:
        raise InputMismatch(f"{where}: file name {path!r} leaves the directory or is not normalised.")
    return path


def read_finite_json(path: Path, name: str) -> Any:
    """read_json, refusing NaN and Infinity (which import.json could not carry)."""
    data = read_json(path)
    try:
        json.dumps(data, allow_nan=False)
    except ValueError:
        raise EvidenceError(f"{name}: holds NaN or Infinity, which JSON does not allow.") from None
    except RecursionError:
        raise EvidenceError(f"{name}: nested too deeply.") from None
    return data


def _listed_items(listing: Any, where: str) -> list[tuple[Any, Any]]:
    """(path, spec) of each listed file: from a {path: digest | object} mapping or a [{path, ...}] list."""
    if isinstance(listing, dict):
        return list(listing.items())
    if not isinstance(listing, list):
        raise InputMismatch(f"{where}: files is {type(listing).__name__}, not an object or a list.")
    if not all(isinstance(item, dict) for item in listing):
        raise InputMismatch(f"{where}: a files entry is not an object.")
    return [(item.get("path", item.get("name")), {k: v for k, v in item.items() if k not in ("path", "name")})
            for item in listing]


def read_source_manifest(root: Path) -> SourceManifest:
    """Their manifest.json: `files` as a {path: digest | object} mapping or a [{path, sha256, ...}] list
    (`name` for `path` too), or without `files` the document itself as that mapping."""
    where = str(Path(root) / MANIFEST_NAME)
    data = read_finite_json(Path(root) / MANIFEST_NAME, where)
    if not isinstance(data, dict):
        raise InputMismatch(f"{where}: not a JSON object.")
    meta = {k: v for k, v in data.items() if k != "files"} if "files" in data else {}
    entries: dict[str, ManifestEntry] = {}
    published: dict[str, dict[str, Any]] = {}
    for raw_path, spec in _listed_items(data.get("files", data), where):
        path = _check_path(raw_path, where)
        entry = {"sha256": spec} if isinstance(spec, str) else spec
        if not isinstance(entry, dict):
            raise InputMismatch(f"{where}: {path}: entry is {type(spec).__name__}, not a sha256 string or an object.")
        if path in entries:
            raise InputMismatch(f"{where}: {path} is listed twice.")
        entries[path] = decode(entry, ManifestEntry, f"{where}: {path}")
        published[path] = {**entry, "sha256": entries[path].sha256.lower()}
    if not entries:
        raise InputMismatch(f"{where}: lists no files.")
    return SourceManifest(Path(root), entries, published, meta)


def file_state(path: Path, digest: str, listing: str) -> str:
    """"" when the listed file is present and has `digest`, "absent", or what is wrong with it."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "not a regular file"
    if not path.exists():
        return "absent"
    return "" if hash_file(path) == digest else f"sha256 differs from {listing}'s"


def locate_source(src: Path) -> Path:
    """The folder holding manifest.json: --src itself or one of the three folders above it."""
    src = Path(src).resolve()
    if not src.is_dir():
        raise InputMismatch(f"{src}: not a directory; --src names the published evidence folder.")
    for candidate in [src, *list(src.parents)[:_UPWARD]]:
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    raise InputMismatch(f"{src}: no {MANIFEST_NAME} here or in the {_UPWARD} folders above; "
                        "point --src at the folder that holds their manifest.json.")


def _unlisted(manifest: SourceManifest) -> list[str]:
    """Every present file (or linked folder) under root that the manifest does not list."""
    root = manifest.root

    def unreadable(exc: OSError) -> None:
        raise InputMismatch(f"{exc.filename}: cannot be listed ({exc.strerror}); nothing was imported.")

    out = []
    for folder, dirs, files in os.walk(root, onerror=unreadable):
        dirs.sort()
        for item in sorted(files) + [d for d in dirs if Path(folder, d).is_symlink()]:
            rel = Path(folder, item).relative_to(root).as_posix()
            if rel != MANIFEST_NAME and rel not in manifest.entries:
                out.append(f"{rel}: present but not in {MANIFEST_NAME}")
    return out


@dataclass(frozen=True)
class CheckedSource:
    """What `verify_source` found: the listed files present with their digests, and those absent."""

    verified: list[str]
    absent: list[str]


def verify_source(manifest: SourceManifest) -> CheckedSource:
    """Every listed file that is present has its bytes and sha256; no present file is unlisted.

    Returns the verified and the absent files; raises InputMismatch naming every problem.
    """
    root = manifest.root
    states = {name: entry.state(root / name, name) for name, entry in sorted(manifest.entries.items())}
    problems = [state for state in states.values() if state not in ("", "absent")] + _unlisted(manifest)
    if problems:
        raise InputMismatch(f"{root} does not match its {MANIFEST_NAME}: " + "; ".join(problems)
                            + ". Nothing was imported; fetch the evidence again.")
    verified = [name for name, state in states.items() if not state]
    if not verified:
        raise InputMismatch(f"{root}: none of the files {MANIFEST_NAME} lists is present.")
    return CheckedSource(verified, [name for name, state in states.items() if state == "absent"])


def _subdir_folder(root: Path, subdir: str) -> str:
    pure = PurePosixPath(subdir.strip("/") or ".")
    if pure.is_absolute() or ".." in pure.parts:
        raise InputMismatch(f"--subdir {subdir!r} must be a folder inside {root}.")
    folder = "" if str(pure) == "." else str(pure)
    if not (root / folder).is_dir():
        raise InputMismatch(f"--subdir {subdir!r}: {root / folder} is not a folder.")
    return folder


def evidence_folder(root: Path, src: Path, subdir: str | None, verified: list[str]) -> str:
    """The evidence folder, relative to root ('' for root itself)."""
    if subdir is not None:
        return _subdir_folder(root, subdir)
    if src != root:
        return src.relative_to(root).as_posix()
    folders = sorted({str(PurePosixPath(n).parent) for n in verified if FILE_RE.match(PurePosixPath(n).name)})
    if not folders:
        raise InputMismatch(f"{root}: no <arm>-measured-<pass>.jsonl file is present; nothing to import.")
    if len(folders) > 1:
        raise InputMismatch(f"{root}: arm files in several folders ({', '.join(folders)}); name one with --subdir.")
    return "" if folders[0] == "." else folders[0]

"""Hash-locked requirement files (pip-compile style) and the wheelhouse they are installed from.

A lock is made from the pip resolver's own report (`pip install --dry-run --report`), which names
every distribution with the sha256 the index published, for the image's interpreter and platform:
no wheel needs to be downloaded to lock. Builds install with `--require-hashes`, so a changed
wheel fails the build; `verify_wheelhouse` makes the same check on the host first, naming the file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..errors import ReproError, VerificationError
from ..hashing import hash_file

__all__ = [
    "Lock",
    "LockFailed",
    "Pin",
    "fill_wheelhouse",
    "link_from_pool",
    "pip_env",
    "read_lock",
    "resolve",
    "verify_wheelhouse",
    "write_lock",
]

STATUS_COMPLETE = "complete"
STATUS_PARTIAL = "partial"


class LockFailed(ReproError):
    """pip could not resolve the requirements for the image's platform from the reachable indexes."""


@dataclass(frozen=True)
class Pin:
    name: str  # normalised (PEP 503)
    version: str
    sha256: tuple[str, ...]

    def line(self) -> str:
        hashes = " \\\n".join(f"    --hash=sha256:{h}" for h in self.sha256)
        return f"{self.name}=={self.version} \\\n{hashes}"


@dataclass
class Lock:
    pins: list[Pin]
    status: str = STATUS_COMPLETE
    notes: list[str] = field(default_factory=list)

    def by_name(self) -> dict[str, Pin]:
        return {p.name: p for p in self.pins}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _target_args(python: str | None, platform: str | None) -> list[str]:
    if not python:
        return []
    tag = "cp" + python.replace(".", "")
    args = ["--python-version", python, "--implementation", "cp", "--abi", tag, "--abi", "abi3", "--abi", "none"]
    return args + [a for p in _platforms(platform) for a in ("--platform", p)]


def _platforms(platform: str | None) -> list[str]:
    """manylinux_2_28_x86_64 -> it and every older manylinux tag it accepts (pip does not expand them)."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform or "")
    if not match:
        return [platform] if platform else []
    glibc, arch = int(match.group(1)), match.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)]
    return tags + [f"{legacy[m]}_{arch}" for m in legacy if m <= glibc] + ["any"]


def pip_env(pypi_only: bool) -> dict[str, str] | None:
    """The environment pip runs in: as configured here, or (pypi_only) with every pip setting of this host
    dropped (PIP_CONFIG_FILE=/dev/null skips all configuration files, local wheel folders and constraints
    included), so pins and downloads come from PyPI alone."""
    if not pypi_only:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def resolve(requirements: list[str], python: str | None = None, platform: str | None = None, no_deps: bool = False,
            pypi_only: bool = False) -> list[Pin]:
    """Resolve requirement strings for (python, platform) without installing; every pin carries its index hash."""
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n")
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
               "--quiet", "--timeout", "20", "--retries", "1", "--report", str(report), "-r", str(req)]
        if python:
            cmd += ["--target", str(Path(tmp) / "target"), *_target_args(python, platform)]
        if no_deps:
            cmd.append("--no-deps")
        done = subprocess.run(cmd, capture_output=True, text=True, env=pip_env(pypi_only), check=False)
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")]
            raise LockFailed("pip could not resolve the requirements: " + (" ".join(errors) or done.stderr[-500:]))
        try:
            items = msgspec.json.decode(report.read_bytes(), type=_InstallReport).install
        except msgspec.DecodeError as exc:
            raise LockFailed(f"pip's install report is not what pip writes ({exc}).") from None
    pins = []
    for item in items:
        sha256 = item.download_info.archive_info.hashes.sha256
        if sha256 is None:
            raise LockFailed(f"the index gave no sha256 for {item.download_info.url}; it cannot be locked.")
        pins.append(Pin(normalise(item.metadata.name), item.metadata.version, (sha256,)))
    return sorted(pins, key=lambda p: p.name)


class _Hashes(msgspec.Struct, frozen=True):
    sha256: str | None = None


class _ArchiveInfo(msgspec.Struct, frozen=True):
    hashes: _Hashes = _Hashes()


class _DownloadInfo(msgspec.Struct, frozen=True):
    url: str
    archive_info: _ArchiveInfo = _ArchiveInfo()


class _Metadata(msgspec.Struct, frozen=True):
    name: str
    version: str


class _Install(msgspec.Struct, frozen=True):
    download_info: _DownloadInfo
    metadata: _Metadata


class _InstallReport(msgspec.Struct, frozen=True):
    """What locking reads of `pip install --report` (pip's installation report, format 1; its other
    fields are not read)."""

    install: list[_Install]


def write_lock(lock: Lock, path: Path, command: str, target: str, options: Sequence[str] = ()) -> None:
    """options: index lines (--index-url, --extra-index-url) the install needs, copied from requirements.in."""
    head = [
        f"# Generated by `{command}`; do not edit by hand.",
        f"# lock-status: {lock.status}",
        f"# target: {target}",
        *[f"# note: {n}" for n in lock.notes],
        *options,
        "",
    ]
    body = [p.line() for p in lock.pins]
    Path(path).write_text("\n".join(head + body) + "\n", encoding="utf-8")


_PIN_RE = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)$")


def _pin_of(path: Path, line: str) -> Pin:
    """One requirement line `name==version --hash=sha256:...`; VerificationError when it is not pinned."""
    parts = line.split()
    match = _PIN_RE.match(parts[0])
    hashes = tuple(p.split("sha256:", 1)[1] for p in parts[1:] if p.startswith("--hash=sha256:"))
    if not match or not hashes:
        raise VerificationError(f"{path}: {parts[0]!r} is not pinned with == and --hash=sha256:...; relock it.")
    return Pin(normalise(match.group(1)), match.group(2), hashes)


def _comment_values(lines: list[str], prefix: str) -> list[str]:
    """The values of every `# key: value` comment line starting with `prefix`, in file order."""
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)]


def read_lock(path: Path) -> Lock:
    """Parse a lock written by write_lock (or by pip-compile --generate-hashes)."""
    path = Path(path)
    if not path.exists():
        raise VerificationError(f"No lock file at {path}; make it with `invoke lock --backend NAME`.")
    lines = [raw.strip() for raw in path.read_text(encoding="utf-8").replace("\\\n", " ").splitlines()]
    pins = [_pin_of(path, line) for line in lines if line and not line.startswith(("#", "--"))]
    statuses = _comment_values(lines, "# lock-status:")  # the last one counts
    return Lock(pins, statuses[-1] if statuses else STATUS_COMPLETE, _comment_values(lines, "# note:"))


def _wheel_key(filename: str) -> tuple[str, str]:
    from packaging.utils import parse_wheel_filename

    name, version, _, _ = parse_wheel_filename(filename)
    return normalise(str(name)), str(version)


def verify_wheelhouse(lock_path: Path, directory: Path) -> dict[str, str]:
    """Every locked pin has exactly one wheel here whose sha256 is a locked hash; nothing else is here.

    Returns {filename: sha256}. Raises VerificationError naming the first offending file.
    """
    lock = read_lock(lock_path)
    pins = lock.by_name()
    found: dict[str, str] = {}
    seen: set[str] = set()
    for wheel in sorted(Path(directory).glob("*.whl")):
        name, version = _wheel_key(wheel.name)
        pin = pins.get(name)
        if pin is None or pin.version != version:
            raise VerificationError(f"Wheelhouse {directory} holds {wheel.name}, which {lock_path} does not pin; remove it.")
        digest = hash_file(wheel)
        if digest not in pin.sha256:
            raise VerificationError(
                f"Wheel {wheel} has sha256 {digest}, but {lock_path} pins {name}=={version} to "
                f"{', '.join(pin.sha256)}. Delete the file and fetch it again (`invoke build` refills the wheelhouse); "
                "if the index really changed the file, relock with `invoke lock` and review the change."
            )
        found[wheel.name] = digest
        seen.add(name)
    missing = sorted(set(pins) - seen)
    if missing:
        raise VerificationError(f"Wheelhouse {directory} lacks {', '.join(missing)} pinned in {lock_path}.")
    return found


def fill_wheelhouse(lock_path: Path, directory: Path, python: str | None = None, platform: str | None = None,
                    pool: Path | None = None, pypi_only: bool = False) -> None:
    """pip download every locked wheel (hash-checked by pip) into directory; skips what is there.

    With a pool, wheels are downloaded once into the pool (shared by every image: hf and fast hold
    the same 3 GB of CUDA wheels) and hard-linked into directory; wheels the lock no longer pins
    are removed from directory (it is a cache, rebuilt from the pool)."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = pool or directory
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
           "--quiet", "--dest", str(dest), "-r", str(lock_path), *_target_args(python, platform)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=pip_env(pypi_only), check=False)
    if done.returncode != 0:
        raise VerificationError(f"pip download of {lock_path} failed: {done.stderr.strip()[-800:]}")
    if pool is not None:
        link_from_pool(read_lock(lock_path), pool, directory)


def _pool_wheels(lock: Lock, pool: Path) -> dict[str, Path]:
    """name -> the pool's wheel of that pin (by name and version; of several, one with a locked hash)."""
    pins = lock.by_name()
    wanted: dict[str, Path] = {}
    for wheel in sorted(pool.glob("*.whl")):
        name, version = _wheel_key(wheel.name)
        pin = pins.get(name)
        if pin is not None and pin.version == version and (name not in wanted or hash_file(wheel) in pin.sha256):
            wanted[name] = wheel
    return wanted


def link_from_pool(lock: Lock, pool: Path, directory: Path) -> None:
    """Hard-link into directory the pool's wheel of every pin (chosen by name and version, checked by
    verify_wheelhouse afterwards); drop wheels there that the lock does not pin."""
    wanted = _pool_wheels(lock, pool)
    names = {w.name for w in wanted.values()}
    for old in directory.glob("*.whl"):
        if old.name not in names:
            old.unlink()
    for wheel in wanted.values():
        target = directory / wheel.name
        if not target.exists():
            os.link(wheel, target)

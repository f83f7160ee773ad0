"""The offline flavour's base: a Debian root filesystem made with debootstrap, pinned by package list.

snapshot.debian.org is not reachable from the build host, so the pin is the suite's Release
date plus the exact name and version of every installed package (images/<b>/offline/
debian-packages.lock). A debootstrap that installs anything else fails the build, naming the
packages, instead of silently producing a different image.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..errors import DockerError, VerificationError
from .rootfs import normalize_tar
from .spec import DebianPin

__all__ = [
    "DebianBase",
    "check_packages",
    "debootstrap",
    "installed_packages",
    "make_base_tar",
    "read_packages_lock",
    "release_date",
    "write_packages_lock",
]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DebianBase:
    tar: Path
    sha256: str  # of the normalised tar: the docker diff ID of the imported base
    release_date: str
    packages: dict[str, str]


def debootstrap(pin: DebianPin, root: Path, progress: Progress = print) -> None:
    if shutil.which("debootstrap") is None:
        raise DockerError("debootstrap is not installed; install it with `sudo apt-get install debootstrap`.")
    cmd = ["debootstrap", f"--variant={pin.variant}", f"--include={','.join(pin.include)}", "--arch=amd64",
           "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg", pin.suite, str(root), pin.mirror]
    progress(f"debootstrap {pin.suite} from {pin.mirror} (about a minute)")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise DockerError(f"debootstrap failed (exit {done.returncode}); it needs root and the Debian mirror:\n{tail}")


def installed_packages(root: Path) -> dict[str, str]:
    """name -> version of every package dpkg marks installed, read from var/lib/dpkg/status."""
    stanzas = [msgspec.convert(dict(line.split(": ", 1) for line in stanza.splitlines()
                                    if ": " in line and not line.startswith(" ")), _DpkgStanza)
               for stanza in (root / "var/lib/dpkg/status").read_text().split("\n\n")]
    return dict(sorted((s.package, s.version) for s in stanzas if s.status.endswith(" installed")))


class _DpkgStanza(msgspec.Struct, frozen=True, rename="pascal"):
    """A package's stanza of dpkg's status file, as far as locking reads it (a stanza of a package that
    is not installed may lack a version)."""

    package: str = ""
    version: str = ""
    status: str = ""


def release_date(root: Path, suite: str) -> str:
    for release in (root / "var/lib/apt/lists").glob(f"*_dists_{suite}_Release"):
        for line in release.read_text().splitlines():
            if line.startswith("Date:"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def read_packages_lock(path: Path) -> dict[str, str]:
    if not path.exists():
        raise VerificationError(f"No Debian package lock at {path}; make it with `invoke lock --backend reference --offline`.")
    pairs = [ln.split() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return {name: version for name, version in pairs}


def write_packages_lock(path: Path, packages: dict[str, str], pin: DebianPin, date: str) -> None:
    head = [f"# debootstrap --variant={pin.variant} --include={','.join(pin.include)} {pin.suite} {pin.mirror}",
            f"# Release Date: {date}", "# name version (dpkg-query), one installed package a line"]
    Path(path).write_text("\n".join(head + [f"{n} {v}" for n, v in packages.items()]) + "\n")


def check_packages(expected: dict[str, str], actual: dict[str, str], date: str, pin_date: str) -> None:
    """VerificationError listing every package whose version differs from the lock."""
    problems = [f"{n} {expected.get(n, '(absent)')} -> {actual.get(n, '(absent)')}"
                for n in sorted(set(expected) | set(actual)) if expected.get(n) != actual.get(n)]
    if problems:
        raise VerificationError(
            f"The Debian mirror gave packages that differ from the pin (Release {date}, pinned {pin_date}): "
            + "; ".join(problems[:20]) + (" ..." if len(problems) > 20 else "")
            + ". The mirror has moved on; relock with `invoke lock --backend reference --offline` "
            "(this changes the image) or build from a mirror that still serves the pinned versions."
        )


def make_base_tar(pin: DebianPin, lock_path: Path, dest: Path, epoch: int, progress: Progress = print) -> DebianBase:
    """debootstrap, check against the package lock, write the deterministic tar to dest."""
    expected = read_packages_lock(lock_path) if lock_path.exists() else None
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        root = Path(tmp) / "root"
        debootstrap(pin, root, progress)
        packages, date = installed_packages(root), release_date(root, pin.suite)
        if expected is not None:
            check_packages(expected, packages, date, pin.release_date)
        raw = Path(tmp) / "raw.tar"
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(raw), "."], check=True)
        sha = normalize_tar(raw, dest, epoch, dest.with_suffix(".members.json"))
    progress(f"base root filesystem {dest.name}: sha256 {sha}, {len(packages)} packages, Release {date}")
    return DebianBase(dest, sha, date, packages)

"""Sources at pinned commits: fetch exactly one commit and prove HEAD is that commit.

The Dockerfiles do the same with images/common/fetch-source.sh; this module is the host-side
twin used by tests and by `invoke lock` to check a pin before it is written.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..errors import VerificationError

__all__ = ["check_commit", "check_has_commit", "fetch_source"]


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise VerificationError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip() or done.stdout.strip()}.")
    return done.stdout.strip()


def check_commit(checkout: Path, expected: str, name: str = "source") -> str:
    """Raise VerificationError unless `git rev-parse HEAD` in checkout is exactly `expected`."""
    actual = _git(Path(checkout), "rev-parse", "HEAD")
    if actual != expected:
        raise VerificationError(
            f"{name} at {checkout} is at commit {actual}, but the image recipe pins {expected}. "
            "Fetch the pinned commit (or update the pin with a reviewed change) and build again."
        )
    return actual


def check_has_commit(checkout: Path, commit: str, name: str = "source") -> None:
    """Raise VerificationError unless the git checkout holds `commit` (as a commit object)."""
    if not (Path(checkout) / ".git").exists() and not (Path(checkout) / "HEAD").exists():
        raise VerificationError(f"{checkout} is not a git checkout; {name} needs a clone holding commit {commit}.")
    done = subprocess.run(["git", "-C", str(checkout), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True,
                          check=False)
    if done.returncode != 0:
        raise VerificationError(f"The checkout {checkout} does not hold commit {commit} ({name}); "
                                f"fetch it (git -C {checkout} fetch origin {commit}) and build again.")


def fetch_source(url: str, commit: str, dest: Path, name: str = "source") -> str:
    """git init + fetch of exactly `commit` (depth 1) + checkout, then check HEAD."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    _git(dest, "init", "-q")
    _git(dest, "fetch", "-q", "--depth", "1", url, commit)
    _git(dest, "-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD")
    return check_commit(dest, commit, name)

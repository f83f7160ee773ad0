"""Exclusive advisory reservation of GPUs: one flock per GPU UUID in a host-wide lock directory.

The lock is `flock(LOCK_EX)` on an open file descriptor, so the kernel releases it when the
holder exits for any reason: a killed holder never leaves a stale reservation. After locking,
the holder writes who it is (pid, user, host, note, start time) into the lock file, so others
can say who holds a GPU. Lock files are never deleted (deleting them races with waiters).

Lock directory: $OPENJEV_LOCK_DIR, else /run/lock/openjev-gpu, else /tmp/openjev-gpu-locks.
Every process that should contend must see the same directory (a container needs it mounted).

A process whose ancestor already holds a GPU (e.g. `invoke study` started under
`invoke reserve`) inherits that reservation instead of waiting for itself.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from ..errors import HostError, ReservationTimeout

__all__ = ["LOCK_FORMAT_VERSION", "Holder", "Reservation", "holder_of", "lock_dir", "reserve_gpus"]

# Format history of the lock file content: 1 (2026-11) first version.
LOCK_FORMAT_VERSION = 1


def lock_dir() -> Path:
    """The host-wide lock directory, created world-writable with the sticky bit like /tmp."""
    env = os.environ.get("OPENJEV_LOCK_DIR")
    if env:
        path = Path(env)
    elif os.access("/run/lock", os.W_OK):
        path = Path("/run/lock/openjev-gpu")
    else:
        path = Path("/tmp/openjev-gpu-locks")
    if not path.is_dir():
        try:
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o1777)
        except OSError as exc:
            raise HostError(f"Cannot create the GPU lock directory {path} ({exc.strerror}); set OPENJEV_LOCK_DIR to a shared writable directory.") from exc
    return path


def _lock_path(directory: Path, uuid: str) -> Path:
    return directory / f"{uuid}.lock"


_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_lock_file(path: Path) -> int:
    """Create the lock file (then open it to every user), or open the existing one without following a link;
    an existing file is never chmod-ed, and must be a regular file with one link, ours or opened to everyone."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, 0o666)
    except FileExistsError:
        return _open_existing(path, os.O_RDWR)
    except OSError as exc:
        raise HostError(f"Cannot open the GPU lock file {path} ({exc.strerror}); set OPENJEV_LOCK_DIR to a shared writable directory.") from exc
    os.fchmod(fd, 0o666)  # ours, just created: let other users lock it too (umask narrowed the create mode)
    return fd


def _open_existing(path: Path, mode: int) -> int:
    try:
        fd = os.open(path, mode | _OPEN)
    except OSError as exc:
        what = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise HostError(f"The GPU lock file {path} {what}; refused. Remove it, or set OPENJEV_LOCK_DIR "
                        "to a directory only lock files live in.") from exc
    problem = _lock_file_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise HostError(f"The GPU lock file {path} {problem}; refused. Remove it, or set OPENJEV_LOCK_DIR "
                        "to a directory only lock files live in.")
    return fd


def _lock_file_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} hard links"
    if st.st_uid != os.geteuid() and st.st_mode & 0o666 != 0o666:
        return f"belongs to uid {st.st_uid} and is not open to every user (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_INFO_TYPES = {"pid": int, "user": str, "host": str, "note": str, "started_at": str, "uuid": str,
               "format_version": int}


class Holder(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who holds a GPU's lock, as its lock file says (keys another version adds are not ours to read),
    or why the file cannot say (`malformed`)."""

    pid: int | None = None
    user: str | None = None
    host: str | None = None
    note: str | None = None
    started_at: str | None = None
    uuid: str | None = None
    format_version: int | None = None
    malformed: str | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = msgspec.to_builtins(self)
        return data

    def describe(self) -> str:
        """The holder in words, for `invoke gpus`."""
        note = f" {self.note!r}" if self.note else ""
        return f"pid {self.pid} {self.user or ''}{note} since {self.started_at or '?'}"


def _misfit(key: str, value: object) -> str | None:
    """Why a holder's `key` is not what `reserve_gpus` writes there; None when it is (or is absent)."""
    kind = _INFO_TYPES[key]
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return None
    return f"{key} is {json.dumps(value)[:40]}, not {'a number' if kind is int else 'text'}"


def _read_info(fd: int) -> Holder | None:
    """The holder's details as written (None before it wrote any); a file of another shape is `malformed`."""
    raw = os.pread(fd, 65536, 0)
    if not raw.strip():
        return None
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):
        return Holder(malformed="not JSON")
    if not isinstance(info, dict):
        return Holder(malformed="not a JSON object")
    misfit = next((m for key in _INFO_TYPES if (m := _misfit(key, info.get(key))) is not None), None)
    return Holder(malformed=misfit) if misfit else Holder(**{key: info[key] for key in _INFO_TYPES if key in info})


def holder_of(uuid: str, directory: Path | None = None) -> Holder | None:
    """Who holds the reservation of this GPU now, or None if nobody does.

    Probes with a shared non-blocking lock, so it never holds anyone up for more than an instant."""
    path = _lock_path(directory or lock_dir(), uuid)
    if not os.path.lexists(path):
        return None
    fd = _open_existing(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_info(fd) or Holder(note="(holder is still writing its details)")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            break
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        found.add(pid)
    return found


def _describe(uuid: str, info: Holder) -> str:
    if info.malformed:
        return f"GPU {uuid} is reserved by a holder whose lock file is malformed ({info.malformed})"
    if not info.pid:
        return f"GPU {uuid} is reserved (holder details not yet written)"
    note = f", note {info.note!r}" if info.note else ""
    return (f"GPU {uuid} is reserved by pid {info.pid} (user {info.user} on {info.host}, "
            f"since {info.started_at}{note})")


@dataclass
class Reservation:
    """What `reserve_gpus` holds; `to_dict()` goes into host.json."""

    uuids: list[str]
    lock_dir: str
    pid: int
    user: str
    host: str
    note: str
    started_at: str  # ISO 8601 UTC, when every lock was held
    waited_s: float
    wait_limit_s: float
    inherited: dict[str, Holder] = field(default_factory=dict)  # uuid -> ancestor holder's details
    released_at: str | None = None
    _fds: dict[str, int] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("_fds")
        data["inherited"] = {uuid: holder.to_json() for uuid, holder in self.inherited.items()}
        return data

    def release(self) -> None:
        """Clear our details and drop the locks; idempotent."""
        for uuid, fd in list(self._fds.items()):
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)  # closing the last fd releases the flock
            del self._fds[uuid]
        if self.released_at is None:
            self.released_at = _now()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container uid without a passwd entry
        return str(os.getuid())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return False
        raise HostError(f"flock failed on a GPU lock file ({exc.strerror}).") from exc


def _acquire(uuid: str, directory: Path, deadline: float, wait_s: float, poll_s: float) -> int:
    fd = _open_lock_file(_lock_path(directory, uuid))
    while not _try_lock(fd):
        if time.monotonic() >= deadline:
            info = _read_info(fd) or Holder()
            os.close(fd)
            raise ReservationTimeout(
                f"{_describe(uuid, info)} and was not released within {wait_s:g} s. "
                "Wait longer (--wait / controls.reservation.wait) or ask the holder to finish."
            )
        time.sleep(poll_s)
    return fd


def _acquire_all(reservation: Reservation, directory: Path, wait_s: float, poll_s: float) -> None:
    ancestors = _ancestors(os.getpid())
    deadline = time.monotonic() + wait_s
    for uuid in sorted(set(reservation.uuids)):  # one global order: two reservers cannot deadlock
        holder = holder_of(uuid, directory)
        if holder and holder.pid in ancestors:
            reservation.inherited[uuid] = holder
            continue
        fd = _acquire(uuid, directory, deadline, wait_s, poll_s)
        reservation._fds[uuid] = fd
    reservation.started_at = _now()
    info = {k: v for k, v in reservation.to_dict().items() if k in ("pid", "user", "host", "note", "started_at")}
    for uuid, fd in reservation._fds.items():
        data = json.dumps({"format_version": LOCK_FORMAT_VERSION, "uuid": uuid, **info}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data + b"\n", 0)


@contextmanager
def reserve_gpus(
    uuids: list[str], wait_s: float = 0.0, note: str = "", directory: Path | None = None, poll_s: float = 0.2
) -> Iterator[Reservation]:
    """Hold an exclusive reservation of every GPU in `uuids` for the `with` block.

    Waits up to `wait_s` for all of them together; ReservationTimeout names the holder and its note."""
    if not uuids:
        raise HostError("No GPU was given to reserve.")
    directory = directory or lock_dir()
    started = time.monotonic()
    reservation = Reservation(
        uuids=list(uuids), lock_dir=str(directory), pid=os.getpid(), user=_user(),
        host=socket.gethostname(), note=note, started_at="", waited_s=0.0, wait_limit_s=wait_s,
    )
    try:
        _acquire_all(reservation, directory, wait_s, poll_s)
        reservation.waited_s = round(time.monotonic() - started, 3)
        yield reservation
    finally:
        reservation.release()

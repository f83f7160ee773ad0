"""Run directories: one per study, never overwritten, with an atomically replaced state file.

Layout of a run directory (every file except the envelope is a manifest subject):

    recipe.yaml            the recipe exactly as given (bytes)
    plan.json              the resolved plan: backends, commands, passes, pins
    inputs.json            every declared input with its verified sha256
    state.json             status running|complete|incomplete, steps attempted and finished
    rows.jsonl             one Row per request (openjev_repro.evidence.rows), flushed after each
    responses/<backend>.jsonl  response bodies: {"backend","workload","phase","pass_index","seq","id","body"}
    logs/<backend>.log     the backend's stdout and stderr
    processes.json         exit record of every process or container we started
    servers.json           per backend: launched or reached by URL, readiness, connections (2026-12 on)
    calibration.json       client overhead against our own no-op endpoint (p50/p99)
    environment.json       host, GPUs, packages, git commit (openjev_repro.manifest.environment)
    memory.jsonl           device memory samples, when a GPU is controlled
    host.json              reservation, device checks, bindings (openjev_repro.host)
    summary.json           statistics and gate outcomes, pure function of rows.jsonl + recipe
    report.md, latency_vs_tokens.png, latency_cdf.png
    manifest.dsse.json     the signed in-toto statement (written last; not its own subject)

Format history of state.json:
    1  (2026-11) first version. Additive: `owner` {pid, start_ticks, boot_id, host} of the
       study that writes it (readers tolerate its absence; see `stale_reason`). Additive:
       `started_utc`, when the run directory was created (the report's "started"; readers fall
       back to the stamp in the directory name).

Every entry of a run is a regular file or a directory (`scan_tree`): links, FIFOs, devices
and empty directories make a run unsignable and fail verify.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ..errors import EvidenceError
from .decoding import UnsetType
from .files import check_format, fsync_directory, json_text, read_json, read_versioned, write_json_atomic
from .state import STATE_FORMAT_VERSION, Owner, StateRecord, Status

__all__ = [
    "BACKENDS_FORMAT_VERSION",
    "ENVELOPE_NAME",
    "INPUTS_FORMAT_VERSION",
    "PROCESSES_FORMAT_VERSION",
    "READABLE_VERSIONS",
    "RESPONSE_VERSIONS",
    "SERVERS_FORMAT_VERSION",
    "STATE_FORMAT_VERSION",
    "RunDir",
    "Status",
    "boot_id",
    "check_response_entry",
    "enclosing_run",
    "fsync_tree",
    "guard_output",
    "process_start_ticks",
    "scan_tree",
    "stale_reason",
    "unsigned_reason",
]

ENVELOPE_NAME = "manifest.dsse.json"
# Written by the runner with these versions (the other files' writers hold their own constants).
INPUTS_FORMAT_VERSION = 1
PROCESSES_FORMAT_VERSION = 1
BACKENDS_FORMAT_VERSION = 1
SERVERS_FORMAT_VERSION = 1

# The format_version of each JSON file of a run that this tool reads; `RunDir.read` refuses any
# other (UnsupportedFormat). tests/test_format_versions.py holds each writer's version in here.
READABLE_VERSIONS: dict[str, tuple[int, ...]] = {
    "state.json": (STATE_FORMAT_VERSION,),
    "plan.json": (1,),
    "inputs.json": (INPUTS_FORMAT_VERSION,),
    "environment.json": (1, 2),
    "host.json": (1,),
    "processes.json": (PROCESSES_FORMAT_VERSION,),
    "backends.json": (BACKENDS_FORMAT_VERSION,),
    "servers.json": (SERVERS_FORMAT_VERSION,),
    "summary.json": (1,),
    "import.json": (1, 2),
    "environment_check.json": (1,),
}
# responses/<backend>.jsonl lines: format 1 lines carry no version; a later format adds "v".
RESPONSE_VERSIONS = (1,)


def check_response_entry(entry: Any, where: str) -> Any:
    """One responses/*.jsonl line (a dict), refused when its "v" names a format this tool does not read."""
    return check_format(entry, RESPONSE_VERSIONS, where, key="v", absent=1)


def scan_tree(root: Path) -> tuple[list[Path], list[str]]:
    """Every entry under root, hidden names included, without following links.

    Returns (regular files sorted by relative path, problems): a symlink, FIFO, socket,
    device or empty directory anywhere is a problem, named by its relative path.
    """
    root = Path(root)
    files: list[Path] = []
    problems: list[str] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            children = list(entries)
        if not children and directory != root:
            problems.append(f"{directory.relative_to(root).as_posix()}/ is an empty directory")
        for entry in children:
            path = Path(entry.path)
            rel = path.relative_to(root).as_posix()
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                pending.append(path)
            elif stat.S_ISREG(mode):
                files.append(path)
            else:
                kind = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
                        stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
                problems.append(f"{rel} is {kind.get(stat.S_IFMT(mode), 'not a regular file')}")
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    return files, sorted(problems)


def fsync_tree(root: Path) -> None:
    """fsync every regular file and directory under root (before a run is called complete)."""
    files, _ = scan_tree(root)
    for path in files:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for directory in sorted({p.parent for p in files} | {Path(root)}):
        fsync_directory(directory)


# --- outputs never touch evidence --------------------------------------------------------


def enclosing_run(path: Path) -> Path | None:
    """The run directory (a directory with state.json or a manifest) that path is, or is inside; None if none."""
    resolved = Path(os.path.abspath(path))
    with_links = Path(path).resolve()
    for candidate in (resolved, with_links):
        for directory in (candidate, *candidate.parents):
            if (directory / "state.json").is_file() or (directory / ENVELOPE_NAME).is_file():
                return directory
    return None


def guard_output(path: Path, *, directory: bool = False, option: str = "--out") -> Path:
    """Refuse an output path that could overwrite evidence: one shared guard for every `--out`.

    Refused: a path inside any run directory (or a run directory itself, signed or not), an
    existing file (or link, even dangling) for a file output, and a non-directory for a
    directory output. Returns the path unchanged.
    """
    path = Path(path)
    run = enclosing_run(path)
    if run is not None:
        raise EvidenceError(f"{option} {path} is inside the run directory {run}; outputs never go into a run "
                            "(its files are evidence). Choose a path outside every run.")
    if directory:
        if os.path.lexists(path) and not path.is_dir():
            raise EvidenceError(f"{option} {path} exists and is not a directory; choose another {option}.")
    elif os.path.lexists(path):
        raise EvidenceError(f"{option} {path} already exists; outputs never overwrite a file. Choose another {option}.")
    return path


# --- who owns a running run --------------------------------------------------------------


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _owner() -> Owner:
    return Owner(pid=os.getpid(), boot_id=boot_id(), start_ticks=process_start_ticks(os.getpid()),
                 host=socket.gethostname())


def _local_owner(state: StateRecord) -> Owner | None:
    """The owner of a "running" state when its liveness can be checked on this machine, else None.

    A run written before owners were recorded (no `owner`) and another machine's study give None.
    """
    if state.status != Status.RUNNING or isinstance(state.owner, UnsetType):
        return None
    if state.owner.host not in (None, socket.gethostname()):
        return None  # another machine's study: its liveness cannot be checked here
    return state.owner


def _rebooted_since(owner: Owner) -> bool:
    return bool(owner.boot_id and boot_id() and owner.boot_id != boot_id())


def stale_reason(state: StateRecord) -> str | None:
    """Why a run whose state says "running" has no live study behind it; None when it may be live.

    A run written before owners were recorded (no `owner`) is never called stale.
    """
    owner = _local_owner(state)
    if owner is None:
        return None
    if _rebooted_since(owner):
        return f"the study (pid {owner.pid}) ran before the machine rebooted"
    ticks = process_start_ticks(owner.pid)
    if ticks is None or (owner.start_ticks is not None and ticks != owner.start_ticks):
        return f"the study that wrote it (pid {owner.pid}) is no longer running"
    return None


def unsigned_reason(state: StateRecord, has_manifest: bool) -> str | None:
    """Why a "complete" run of a study started with --key is not complete: its manifest was never
    written (the study died between the two). None while the study itself is writing it."""
    if state.status != Status.COMPLETE or state.signing_requested is not True or has_manifest:
        return None
    if not isinstance(state.owner, UnsetType) and state.owner.pid == os.getpid():
        return None  # this process is the study, between "complete" and its manifest
    return ("state.json says complete, but the study was started with --key and its manifest was never "
            "written (it ended before signing)")


class RunDir:
    """A study's run directory and its state file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, parent: Path, study_id: str) -> RunDir:
        """A new directory `<study_id>-<UTC time>-<random>` under parent; never reuses one."""
        now = datetime.now(UTC)
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        path = Path(parent) / f"{study_id}-{stamp}-{secrets.token_hex(3)}"
        path.mkdir(parents=True, exist_ok=False)
        run = cls(path)
        try:
            (path / "logs").mkdir()
            (path / "responses").mkdir()
            run.write_state(StateRecord(Status.RUNNING.value, owner=_owner(),
                                        started_utc=now.isoformat(timespec="seconds")))
        except BaseException:  # a directory without its state file is no run: leave nothing behind
            shutil.rmtree(path, ignore_errors=True)
            raise
        return run

    @classmethod
    def open(cls, path: Path) -> RunDir:
        run = cls(Path(path))
        if not (run.path / "state.json").is_file():
            raise EvidenceError(f"{path} is not a run directory (no state.json).")
        return run

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def rows_path(self) -> Path:
        return self.path / "rows.jsonl"

    def log_path(self, backend: str) -> Path:
        return self.path / "logs" / f"{backend}.log"

    def responses_path(self, backend: str) -> Path:
        return self.path / "responses" / f"{backend}.jsonl"

    # --- state -------------------------------------------------------------------
    def read(self, name: str) -> Any:
        """A JSON file of the run (a key of READABLE_VERSIONS), refused unless its format_version is readable."""
        return read_versioned(self.path / name, READABLE_VERSIONS[name])

    def read_unversioned(self, name: str) -> Any:
        """A JSON file of the run written without a format_version (calibration.json)."""
        return read_json(self.path / name)

    def as_written(self, name: str) -> Any:
        """A run file's JSON document whole, as written (None when the run has none): what a signed statement
        copies and verify compares with that copy. Versioned files are refused unless their format is readable."""
        path = self.path / name
        if not path.is_file():
            return None
        return self.read(name) if name in READABLE_VERSIONS else read_json(path)

    def state_record(self) -> StateRecord:
        """state.json as written (no stale check: `effective_state_record` and `records.state_of` make that)."""
        return StateRecord.from_json(self.read("state.json"), str(self.path / "state.json"))

    def write_state(self, state: StateRecord | Mapping[str, Any]) -> StateRecord:
        """Write the state (a mapping is decoded into the record first) with this version and the time; return it."""
        record = state if isinstance(state, StateRecord) else StateRecord.from_json(dict(state))
        record = msgspec.structs.replace(record, format_version=STATE_FORMAT_VERSION,
                                         updated_unix=round(time.time(), 3))
        write_json_atomic(self.path / "state.json", record.to_json())
        return record

    def rewrite_state_in_place(self, record: StateRecord) -> None:
        """state.json overwritten in its own blocks (no temporary file): what a full disk still allows."""
        data = json_text(record.to_json(), indent=2, sort_keys=True).encode()
        with open(self.path / "state.json", "r+b") as fh:
            fh.write(data)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())

    def update_state(self, **changes: Any) -> StateRecord:
        return self.write_state(self.state_record().changed(**changes))

    def attempt(self, step: str) -> None:
        self.write_state(self.state_record().attempting(step))

    def finish(self, step: str) -> None:
        self.write_state(self.state_record().finishing(step))

    def effective_state_record(self) -> StateRecord:
        """state.json, with a "running" status whose study has died reported as "incomplete" (stale)."""
        state = self.state_record()
        reason = stale_reason(state)
        if reason:
            return msgspec.structs.replace(state, status=Status.INCOMPLETE.value, stale=True,
                                           error=f"stale run: state.json says running, but {reason}")
        unsigned = unsigned_reason(state, (self.path / ENVELOPE_NAME).exists())
        if unsigned:
            return msgspec.structs.replace(state, status=Status.INCOMPLETE.value, error=unsigned)
        return state

    def evidence_files(self) -> list[Path]:
        """Every file of the run except the top-level envelope, hidden names included, sorted by relative path.

        Raises EvidenceError when the run holds anything but regular files and directories.
        """
        files, problems = scan_tree(self.path)
        if problems:
            raise EvidenceError(f"{self.path} holds entries that are not regular files: {'; '.join(problems[:5])}.")
        return [p for p in files if p != self.path / ENVELOPE_NAME]

"""hash_file and hash_files against hashlib on real random files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from openjev_repro.errors import InputMismatch
from openjev_repro.hashing import hash_file, hash_files

SIZES = [0, 1, 4095, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 12345]


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    rng = random.Random(7)
    paths = []
    for i, size in enumerate(SIZES):
        p = tmp_path / f"file{i}.bin"
        p.write_bytes(rng.randbytes(size))
        paths.append(p)
    return paths


def expected(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("chunk", [1, 1000, 1 << 20])
def test_hash_file_equals_hashlib(files, chunk) -> None:
    for p in files[:4] if chunk == 1 else files:
        assert hash_file(p, chunk=chunk) == expected(p)


@pytest.mark.parametrize("workers", [None, 1, 2, 8])
def test_hash_files_equals_hashlib_and_keeps_the_given_order(files, workers) -> None:
    given = list(reversed(files))
    digests = hash_files(given, workers=workers)
    assert list(digests) == given
    assert digests == {p: expected(p) for p in given}


def test_progress_sums_to_total_bytes(files) -> None:
    seen: list[int] = []
    hash_files(files, workers=3, progress=seen.append)
    assert sum(seen) == sum(SIZES)
    assert all(n > 0 for n in seen)


def test_duplicates_are_hashed_once(files) -> None:
    seen: list[int] = []
    digests = hash_files([files[-1], str(files[-1]), files[-1]], progress=seen.append)  # type: ignore[list-item]
    assert digests == {files[-1]: expected(files[-1])}
    assert sum(seen) == SIZES[-1]


def test_empty_list() -> None:
    assert hash_files([]) == {}


def test_missing_file_fails_before_any_reading(files, tmp_path) -> None:
    seen: list[int] = []
    missing = tmp_path / "nope.bin"
    with pytest.raises(InputMismatch, match=r"nope\.bin: no such file"):
        hash_files([*files, missing], progress=seen.append)
    assert seen == []
    with pytest.raises(InputMismatch, match="no such file"):
        hash_file(missing)


def test_directory_is_refused(tmp_path) -> None:
    with pytest.raises(InputMismatch, match="not a regular file"):
        hash_files([tmp_path])
    with pytest.raises(InputMismatch, match="is a directory"):
        hash_file(tmp_path)


def test_unreadable_file_is_a_clear_error(files) -> None:
    # /proc/self/mem is a regular file whose first page nobody can read, root included (EIO), so
    # this runs as root in CI too (a chmod 0 file does not stop root).
    unreadable = Path("/proc/self/mem")
    with pytest.raises(InputMismatch, match=r"/proc/self/mem: cannot be read \(Input/output error\)"):
        hash_files([*files, unreadable])
    with pytest.raises(InputMismatch, match="cannot be read"):
        hash_file(unreadable)


def _within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """Run `call` in a thread; fail the test if it is still running after `seconds`."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - whatever the call raised is handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still waiting after {seconds} s")
    return outcome[0]


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path) -> None:
    fifo = tmp_path / "requests.jsonl"
    os.mkfifo(fifo)
    try:
        for call in (lambda: hash_file(fifo), lambda: hash_files([fifo])):
            error = _within(10, call)
            assert isinstance(error, InputMismatch) and "not a regular file" in str(error), error
    finally:  # a reader stuck in open() (the bug this guards against) returns once a writer comes and goes
        with contextlib.suppress(OSError):  # ENXIO: no reader is waiting
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

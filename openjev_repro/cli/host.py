"""GPU host tasks: `invoke gpus` (inventory) and `invoke reserve ... -- CMD` (reserve, run, time out)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from invoke import Exit, task

from ..errors import HostError
from . import user_errors

__all__ = ["command_after_dashes", "gpus", "reserve"]

TIMEOUT_EXIT = 124  # like GNU timeout(1)


def command_after_dashes(remainder: str, argv: list[str]) -> list[str]:
    """The command after `--`, with its original word boundaries.

    invoke joins the words after `--` with spaces into ctx.remainder, which loses quoting
    (`sh -c "a b"`); the process's own argv still has them, so take the words from there."""
    if "--" in argv:
        words = argv[argv.index("--") + 1:]
        if " ".join(words) == remainder:
            return words
    return shlex.split(remainder)


def _duration(text: str, flag: str) -> float:
    from ..evidence.recipe import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise HostError(f"{flag}: {exc}.") from exc


def _checked_uuids(wanted: list[str]) -> list[str]:
    """UUIDs as given, each checked against the driver when there is one (a lock needs none)."""
    from ..host import NoDriver, detect_driver

    try:
        driver = detect_driver()
    except NoDriver:
        return wanted  # a lock needs no driver; nothing to check the UUIDs against
    known = {g.uuid for g in driver.gpus()}
    driver.close()
    missing = [w for w in wanted if w not in known]
    if missing:
        raise HostError(f"No GPU on this host has UUID {', '.join(missing)}; `invoke gpus` lists them.")
    return wanted


def _uuids_of_indices(wanted: list[str]) -> list[str]:
    """The UUIDs of GPU indices, from the driver (indices mean nothing without one)."""
    from ..host import detect_driver

    driver = detect_driver()
    try:
        by_index = {str(g.index): g.uuid for g in driver.gpus()}
    finally:
        driver.close()
    missing = [w for w in wanted if w not in by_index]
    if missing:
        raise HostError(f"No GPU index {', '.join(missing)} on this host (indices: {', '.join(by_index)}).")
    return [by_index[w] for w in wanted]


def _resolve(ids: str) -> list[str]:
    """'2,3' or 'GPU-…' -> UUIDs. Indices need the driver; UUIDs are checked when it is there."""
    wanted = [w.strip() for w in ids.split(",") if w.strip()]
    if not wanted:
        raise HostError("--gpu-ids is empty; give indices like 2 or UUIDs like GPU-cbf66259-….")
    if all(w.startswith("GPU-") for w in wanted):
        return _checked_uuids(wanted)
    return _uuids_of_indices(wanted)


@contextmanager
def _signals_end_the_command():
    """SIGTERM/SIGHUP to us become SystemExit, so run_with_timeout stops CMD's group before the
    reservation is released: a GPU is never marked free while our command still runs on it."""

    def leave(signum, _frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@task(help={"json": "print the inventory as JSON (on a host without a driver: an empty list and the reason)"})
@user_errors
def gpus(ctx, json_=False):
    """List every GPU: index, UUID, name, memory, compute processes, NUMA node, reservation holder."""
    from ..host import NoDriver, detect_driver, inventory

    try:
        driver = detect_driver()
    except NoDriver as exc:  # not an error: there is simply nothing to list here
        print(json.dumps({"driver": None, "gpus": [], "no_driver": str(exc)}, indent=2) if json_ else str(exc))
        return
    try:
        inv = inventory(driver)
    finally:
        driver.close()
    print(json.dumps(inv.to_json(), indent=2, sort_keys=True) if json_ else inv.text())


@task(
    help={
        "gpu_ids": "GPU indices or UUIDs to reserve, comma-separated (e.g. 2 or GPU-cbf66259-…)",
        "wait": "how long to wait for a reservation held by someone else (e.g. 10m; default 0s)",
        "timeout": "stop the command's whole process group after this long (default 45m)",
        "grace": "time between SIGTERM and SIGKILL at the timeout (default 10s)",
        "note": "a label others see while you hold the GPU",
        "record": "write the reservation and the command's exit record to this JSON file",
    },
)
@user_errors
def reserve(ctx, gpu_ids, wait="0s", timeout="45m", grace="10s", note="", record=None):
    """Reserve GPUs exclusively, run the command after `--` in its own process group, release."""
    from ..evidence.files import write_json_atomic
    from ..host import reserve_gpus, run_with_timeout

    cmd = command_after_dashes(ctx.remainder, sys.argv)
    if not cmd:
        raise HostError("No command to run: put it after `--`, e.g. invoke reserve --gpu-ids 2 -- nvidia-smi.")
    wait_s, timeout_s, grace_s = _duration(wait, "--wait"), _duration(timeout, "--timeout"), _duration(grace, "--grace")
    uuids = _resolve(gpu_ids)
    with _signals_end_the_command(), reserve_gpus(uuids, wait_s=wait_s, note=note) as held:
        print(f"reserved {', '.join(uuids)} (lock dir {held.lock_dir}, waited {held.waited_s:g} s)", file=sys.stderr)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(uuids)}
        outcome = run_with_timeout(cmd, timeout_s, grace_s, env=env)
    if record:
        write_json_atomic(Path(record), {"format_version": 1, "reservation": held.to_dict(), "command": outcome.to_json()})
    if outcome.timed_out:
        how = "killed with SIGKILL" if outcome.killed else "stopped with SIGTERM"
        raise Exit(f"error: the command ran past --timeout {timeout} and its process group was {how}.", code=TIMEOUT_EXIT)
    if outcome.signal:
        raise Exit(code=128 + signal.Signals[outcome.signal].value)
    if outcome.exit_status:
        raise Exit(code=outcome.exit_status)

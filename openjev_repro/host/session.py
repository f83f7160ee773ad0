"""A recipe's controls applied for the length of one study: reservation, exact device,
NUMA/CPU binding, memory samples and the cleanup checks: memory.jsonl, and the record the runner
writes to host.json."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Self

from ..errors import RunIncomplete
from ..evidence.files import write_json_atomic
from ..evidence.recipe import Controls, parse_duration
from ..evidence.records import HostRecord
from .allocation import slurm_record
from .detect import detect_driver
from .device import check_cleanup, check_device
from .driver import GpuDriver
from .gpu_state import GpuStateSampler, write_unavailable
from .inventory import host_record
from .memory import MemorySampler
from .numa import effective_binding, numa_prefix
from .override import GpuOverride
from .reservation import Reservation, reserve_gpus

__all__ = ["HostSession"]


class HostSession:
    """Enter before the first backend starts; close after the last one stopped.

    Without controls (a laptop, CI) it records that nothing was controlled and changes nothing.
    """

    def __init__(self, controls: Controls, run_path: Path, *, allow_busy: bool = False,
                 driver: GpuDriver | None = None, gpu_override: GpuOverride | None = None) -> None:
        self.controls = controls
        self.recipe_gpu = controls.gpu
        self.gpu_override = gpu_override
        self.override_record: dict | None = None
        self.run_path = run_path
        self.allow_busy = allow_busy or controls.allow_busy
        self._gpu_driver = driver
        self._stack = ExitStack()
        self.reservation: Reservation | None = None
        self.device: dict | None = None
        self.sampler: MemorySampler | None = None
        self.gpu_state: GpuStateSampler | None = None
        self.bindings: dict[str, dict] = {}
        self.deadline: float | None = None
        self._pids: list[int] = []
        self.record: HostRecord | None = None  # host.json's record, once the session is left

    def __enter__(self) -> Self:
        """Resolve the GPU (an override's, else the recipe's), reserve it, check it, start sampling.

        On a failure here everything already held (the reservation, the sampler) is released.
        """
        try:
            return self._enter()
        except BaseException:
            self._stack.close()
            raise

    def __exit__(self, *exc_info: object) -> None:
        """close() with every process tracked, then host.json written into the run directory."""
        self.record = self.close(self._pids)
        write_json_atomic(self.run_path / "host.json", self.record.to_json())

    def track_process(self, pid: int) -> None:
        """A process the study started (and stopped): cleanup checks that nothing of it is left on the GPU."""
        self._pids.append(pid)

    def _enter(self) -> Self:
        if self.gpu_override is not None:  # the run-time GPU replaces the recipe's for this run only
            self._gpu_driver = self._gpu_driver or detect_driver()
            effective = self.gpu_override.resolve(self._gpu_driver)
            self.override_record = self.gpu_override.record(self.recipe_gpu, effective)
            self.controls = self.gpu_override.apply(self.controls, effective)
        gpu = self.controls.gpu
        reservation = self.controls.reservation
        if reservation is not None:
            self.deadline = time.monotonic() + parse_duration(reservation.timeout)
        if gpu is None:
            return self
        driver = self._gpu_driver or detect_driver()
        self._gpu_driver = driver
        if reservation is not None:
            self.reservation = self._stack.enter_context(
                reserve_gpus([gpu.uuid], wait_s=parse_duration(reservation.wait), note=reservation.note))
        self.device = check_device(driver, gpu.index, gpu.uuid, allow_busy=self.allow_busy)
        self.device["allow_busy"] = self.allow_busy
        self.device["state_at_start"] = _starting_state(driver, gpu.uuid)  # idle clocks and temperature
        period = self.controls.memory_sample_period_ms / 1000
        self.sampler = self._stack.enter_context(MemorySampler(driver, gpu.uuid, period_s=period))
        self.gpu_state = self._stack.enter_context(GpuStateSampler(driver, gpu.uuid, period_s=period))
        return self

    @property
    def gpu_uuid(self) -> str | None:
        """The GPU the backends run on: the override's once entered, else the recipe's."""
        return self.controls.gpu.uuid if self.controls.gpu else None

    def command_prefix(self) -> list[str]:
        """numactl for the local runtime when the recipe binds a NUMA node."""
        if self.controls.numa_node is None:
            return []
        return numa_prefix(self.controls.numa_node, self.controls.cpus)

    def record_binding(self, name: str, pid: int | None) -> None:
        if pid is not None:
            self.bindings[name] = effective_binding(pid)

    def begin(self, label: str) -> None:
        self._check_deadline(label)
        if self.sampler is not None:
            self.sampler.begin(label)
        if self.gpu_state is not None:  # last before the pass's first request: its energy reading
            self.gpu_state.read("begin", label)

    def end(self, label: str) -> None:
        if self.gpu_state is not None:  # first after the pass's last response
            self.gpu_state.read("end", label)
        if self.sampler is not None:
            self.sampler.end(label)

    def idle_window(self, label: str, seconds: float) -> None:
        """A quiet window after readiness (model loaded, nothing in flight): idle power for energy above idle."""
        if self.gpu_state is not None:
            self.gpu_state.idle(label, seconds)

    def _check_deadline(self, label: str) -> None:
        reservation = self.controls.reservation  # the deadline comes from it
        if self.deadline is not None and reservation is not None and time.monotonic() > self.deadline:
            raise RunIncomplete(f"The reservation timeout ({reservation.timeout}) passed before "
                                f"{label}; the study stops here.")

    def _write_gpu_state(self) -> None:
        path = self.run_path / "gpu.jsonl"
        if self.gpu_state is not None:
            self.gpu_state.stop()
            self.gpu_state.write(path)
        elif not path.exists():
            write_unavailable(path, "the recipe controls no GPU (controls.gpu is absent), so no GPU state "
                                    "or energy was sampled")

    def close(self, pids: list[int]) -> HostRecord:
        """Stop sampling, check cleanup, release the GPU; write memory.jsonl and return host.json's record
        (the runner writes it into the run directory)."""
        cleanup = None
        try:
            if self.sampler is not None:
                self.sampler.stop()
                self.sampler.write(self.run_path / "memory.jsonl")
            self._write_gpu_state()
            if self.device is not None:
                assert self._gpu_driver is not None and self.controls.gpu is not None  # set with self.device
                cleanup = check_cleanup(self._gpu_driver, self.controls.gpu.uuid,
                                        self.device["memory_used_at_start_mib"], pids=pids, pgids=pids)
        finally:
            self._stack.close()
        record = host_record(self.reservation.to_dict() if self.reservation else None, self.device,
                             {"prefix": self.command_prefix(), "effective": self.bindings},
                             cleanup, self.sampler.summary().to_json() if self.sampler else None)
        override = None if self.gpu_override is None else self.override_record or {
            **self.gpu_override.declared(self.recipe_gpu), "resolved": False}
        # slurm: job, array index, node and allocated GPU when run as a Slurm task
        slurm = slurm_record()
        return record.changed(controlled=self.controls.gpu is not None, gpu_override=override, slurm=slurm)


def _starting_state(driver: GpuDriver, uuid: str) -> dict:
    try:
        state = driver.gpu_state(uuid)
    except Exception as exc:  # noqa: BLE001 - the record says what it could not read
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    return {"available": True, **state} if state else {"available": False, "reason": f"{driver.name} reads no GPU state"}

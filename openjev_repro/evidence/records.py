"""Typed records of a run's JSON files: each decoded once, here, and written back byte for byte.

    file                    record              read it with
    state.json              StateRecord         state_of(run)       (state.py; stale runs read incomplete)
    host.json               HostRecord          host_of(run)        (None without one)
    environment.json        EnvironmentRecord   environment_of(run) (empty without one)
    backends.json           BackendsRecord      backends_of(run)    (empty without one)
    import.json             ImportRecord        import_of(run)      (None for a run that was not imported)
    inputs.json             InputsRecord        inputs_of(run)
    processes.json          ProcessesRecord     processes_of(run)   (empty without one)
    servers.json            ServersRecord       servers_of(run)     (empty without one)
    environment_check.json  EnvironmentCheckRecord  environment_check_of(run)  (None without one)
    calibration.json        CalibrationRecord   calibration_of(run) (None without one)
    plan.json               Plan                plan_of(run)        (plan.py; None without one)

Each record is a frozen `msgspec.Struct` (evidence/decoding.Record): every key any writer of this
tool wrote is a field, an unknown key is refused, an optional key a writer sometimes omits is UNSET
(so absent stays absent), and numbers and text are bounded in the type. `Record.from_json(data,
where)` decodes a parsed file (one EvidenceError line naming the file and msgspec's field path),
`to_json()` gives back exactly what the file holds, and the writers build these records and write
`to_json()` through `files.write_json_atomic`, so no committed file's bytes change
(tests/test_records.py rebuilds every committed run's files from their records).

Nothing outside the evidence package reads a run file's keys: tests/test_record_reads.py holds that.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, TypeVar

import msgspec

from ..errors import EvidenceError, UnsupportedFormat
from .decoding import (
    UNSET,
    Count,
    Finite,
    Int64,
    Number,
    Quoted,
    Record,
    Text,
    TritonCacheRef,
    Unavailable,
    UnsetType,
    decode,
)
from .identity import RuntimeIdentity
from .rundir import (
    BACKENDS_FORMAT_VERSION,
    INPUTS_FORMAT_VERSION,
    PROCESSES_FORMAT_VERSION,
    SERVERS_FORMAT_VERSION,
    RunDir,
)
from .state import StateRecord

if TYPE_CHECKING:
    from .plan import Plan

__all__ = [
    "Autotune",
    "BackendFacts",
    "BackendsRecord",
    "BindingPart",
    "CalibrationRecord",
    "CleanupCheck",
    "CleanupPart",
    "Connections",
    "DevicePart",
    "DriverRef",
    "EnvironmentCheckRecord",
    "EnvironmentRecord",
    "ExitEntry",
    "FigureCounts",
    "GpuDevice",
    "GpuRef",
    "HardwareFigures",
    "HostRecord",
    "ImportRecord",
    "InputEntry",
    "InputsRecord",
    "MemoryPart",
    "ProcessesRecord",
    "PublishedGate",
    "PublishedStudy",
    "ReadinessEntry",
    "RecordedGpuOverride",
    "ReservationPart",
    "ResponseEntry",
    "ServerEntry",
    "ServersRecord",
    "StateRecord",
    "backends_of",
    "calibration_of",
    "environment_check_of",
    "environment_of",
    "host_of",
    "import_of",
    "inputs_of",
    "plan_of",
    "processes_of",
    "servers_of",
    "state_of",
]

R = TypeVar("R", bound=Record)


def _read(run: RunDir, name: str, kind: type[R]) -> R | None:
    """The run's file `name` as `kind`; None when the run has no such file."""
    path = run.file(name)
    return decode(run.read(name), kind, str(path)) if path.is_file() else None


# --- state.json (the record is in state.py, beside Status) -----------------------------


def state_of(run: RunDir) -> StateRecord:
    """The run's effective state: a "running" state whose study has died reads as incomplete."""
    return run.effective_state_record()


# --- the GPU override (host.json, environment.json and plan.json) ----------------------


class GpuRef(Record, frozen=True, kw_only=True):
    index: Count | None = None
    uuid: Text | None = None
    index_from: Text | UnsetType = UNSET  # host.json's run_time: "override" or "uuid lookup"


class RecordedGpuOverride(Record, frozen=True, kw_only=True):
    """A run on another GPU than the recipe pins (issue 11), as recorded: where it ran, what the recipe
    says, who said so (host/override.GpuOverride is the request that produces it)."""

    source: Text
    recipe: GpuRef | None = None
    run_time: GpuRef
    resolved: bool | UnsetType = UNSET  # False: the session stopped before it looked the GPU up

    @property
    def recipe_gpu(self) -> GpuRef:
        return self.recipe if self.recipe is not None else GpuRef()


# --- host.json --------------------------------------------------------------------------


class ReservationPart(Record, frozen=True, kw_only=True):
    """host/reservation.Reservation as written: who held the GPU lock, how long it waited."""

    uuids: list[Text]
    lock_dir: Text
    pid: Count
    user: Text
    host: Text
    note: Text
    started_at: Text
    waited_s: Number
    wait_limit_s: Number
    # uuid -> an ancestor holder's details, as its lock file said
    inherited: dict[str, dict[str, Quoted]] = msgspec.field(default_factory=dict)
    released_at: Text | None = None


class DriverRef(Record, frozen=True, kw_only=True):
    backend: Text
    version: Text


class GpuProcessEntry(Record, frozen=True, kw_only=True):
    pid: Count
    name: Text | None = None
    used_memory_mib: Count | None = None


class GpuStateReading(Record, frozen=True, kw_only=True):
    """A driver's clocks, temperature and power, or why it read none (host/session._starting_state)."""

    available: bool
    reason: Text | UnsetType = UNSET
    sm_clock_mhz: Count | None | UnsetType = UNSET
    mem_clock_mhz: Count | None | UnsetType = UNSET
    clock_event_reasons: Count | None | UnsetType = UNSET
    temperature_c: Int64 | None | UnsetType = UNSET
    power_w: Number | None | UnsetType = UNSET
    energy_mj: Count | None | UnsetType = UNSET


class DevicePart(Record, frozen=True, kw_only=True):
    """host/device.check_device: the exact GPU checked before the study."""

    index: Count
    uuid: Text
    name: Text
    memory_total_mib: Count
    memory_used_at_start_mib: Count
    processes_at_start: list[GpuProcessEntry]
    busy_at_start: bool
    allow_busy: bool
    pci_bus_id: Text
    numa_node: Count | None
    driver: DriverRef
    checked_at: Text
    state_at_start: GpuStateReading | UnsetType = UNSET


class EffectiveBinding(Record, frozen=True, kw_only=True):
    pid: Count
    cpus_allowed_list: Text
    mems_allowed_list: Text
    memory_policy: Text | None


class BindingPart(Record, frozen=True, kw_only=True):
    prefix: list[Text]
    effective: dict[str, EffectiveBinding]


class CleanupCheck(Record, frozen=True, kw_only=True):
    name: Text
    passed: bool
    detail: Text
    pids: list[Count] | UnsetType = UNSET
    pgids: list[Count] | UnsetType = UNSET
    start_mib: Count | UnsetType = UNSET
    end_mib: Count | UnsetType = UNSET
    tolerance_mib: Count | UnsetType = UNSET


class CleanupPart(Record, frozen=True, kw_only=True):
    passed: bool
    checks: list[CleanupCheck]
    checked_at: Text


class MemoryPass(Record, frozen=True, kw_only=True):
    label: Text
    samples: Count
    max_sample_mib: Count | None
    after_mib: Count | None
    note: Text


class MemoryPart(Record, frozen=True, kw_only=True):
    format_version: int
    uuid: Text
    period_s: Number
    note: Text
    samples: Count
    max_sample_mib: Count | None
    errors: Count
    passes: list[MemoryPass]


class SlurmGpu(Record, frozen=True, kw_only=True):
    allocated: Count | None
    index: Count | None
    uuid: Text | None
    source: Text
    uuid_error: Text | None


class SlurmPart(Record, frozen=True, kw_only=True):
    job_id: Text
    array_job_id: Text | None
    array_task_id: Count | None
    node: Text | None
    partition: Text | None
    gpu: SlurmGpu | None
    env: dict[str, Text]


class HostRecord(Record, frozen=True, kw_only=True):
    """host.json (openjev_repro.host.session), what the host session writes.

    reservation, device, binding, cleanup and memory are always written (null when the study did
    not use them); controlled, gpu_override and slurm only when the writer knew them.
    """

    format_version: int = 1
    reservation: ReservationPart | None = None
    device: DevicePart | None = None
    binding: BindingPart | None = None
    cleanup: CleanupPart | None = None
    memory: MemoryPart | None = None
    controlled: bool | UnsetType = UNSET
    gpu_override: RecordedGpuOverride | UnsetType = UNSET
    slurm: SlurmPart | UnsetType = UNSET

    @classmethod
    def from_json(cls, data: object, where: str = "host.json") -> HostRecord:
        return decode(data, cls, where)

    def changed(self, **parts: object) -> HostRecord:
        """The record with `parts` (as dicts) set; a part given as None stays absent."""
        given = {key: value for key, value in parts.items() if value is not None}
        return HostRecord.from_json({**self.to_json(), **given})

    @property
    def override(self) -> RecordedGpuOverride | None:
        """The GPU override (issue 11), None when the run used the recipe's GPU."""
        return None if isinstance(self.gpu_override, UnsetType) else self.gpu_override

    @property
    def cleanup_failed(self) -> bool:
        return self.cleanup is not None and not self.cleanup.passed


def host_of(run: RunDir) -> HostRecord | None:
    """host.json's record, None for a run without one."""
    return _read(run, "host.json", HostRecord)


# --- environment.json ------------------------------------------------------------------

_Maybe = Unavailable | UnsetType  # a collector's value, or why it has none


class HostPart(Record, frozen=True, kw_only=True):
    available: bool
    reason: Text | UnsetType = UNSET
    hostname: Text | UnsetType = UNSET
    cpu_model: Text | _Maybe = UNSET
    cpu_count: Count | None | UnsetType = UNSET
    cpu_affinity: list[Count] | _Maybe = UNSET
    numa_nodes: list[Count] | _Maybe = UNSET
    kernel: Text | UnsetType = UNSET
    os: Text | UnsetType = UNSET
    memory_total_bytes: Count | _Maybe = UNSET


class CurrentFrequency(Record, frozen=True, kw_only=True):
    available: bool | UnsetType = UNSET
    reason: Text | UnsetType = UNSET
    min: Count | UnsetType = UNSET
    max: Count | UnsetType = UNSET
    mean: Count | UnsetType = UNSET


class CpuFrequency(Record, frozen=True, kw_only=True):
    """cpufreq over every CPU: each setting as {value: number of CPUs holding it}."""

    available: bool | UnsetType = UNSET
    reason: Text | UnsetType = UNSET
    cpus: Count | UnsetType = UNSET
    scaling_driver: dict[str, Count] | UnsetType = UNSET
    scaling_governor: dict[str, Count] | UnsetType = UNSET
    energy_performance_preference: dict[str, Count] | UnsetType = UNSET
    scaling_min_freq: dict[str, Count] | UnsetType = UNSET
    scaling_max_freq: dict[str, Count] | UnsetType = UNSET
    cpuinfo_max_freq: dict[str, Count] | UnsetType = UNSET
    scaling_cur_freq_khz: CurrentFrequency | UnsetType = UNSET
    boost: Text | _Maybe = UNSET


class CpuPart(Record, frozen=True, kw_only=True):
    available: bool
    reason: Text | UnsetType = UNSET
    model: Text | _Maybe = UNSET
    cores_online: Count | None | UnsetType = UNSET
    cores_usable: Count | _Maybe = UNSET
    cpufreq: CpuFrequency | UnsetType = UNSET
    load_average_1_5_15: list[Finite] | _Maybe = UNSET
    thread_env: dict[str, Text | None] | UnsetType = UNSET


class Clocks(Record, frozen=True, kw_only=True):
    sm: Count | _Maybe = UNSET
    memory: Count | _Maybe = UNSET
    sm_max: Count | _Maybe = UNSET


class GpuDevice(Record, frozen=True, kw_only=True):
    """One GPU as environment.json lists it (NVML, the host inventory or nvidia-smi)."""

    name: Text
    uuid: Text
    index: Count | UnsetType = UNSET
    source: Text | UnsetType = UNSET
    driver_version: Text | UnsetType = UNSET
    cuda_driver_version: Text | _Maybe = UNSET
    memory_total_mib: Count | _Maybe = UNSET
    memory_used_mib: Count | _Maybe = UNSET
    memory_reserved_mib: Count | _Maybe = UNSET
    pci_bus_id: Text | UnsetType = UNSET
    cuda_cores: Count | _Maybe = UNSET
    sm_count: Count | _Maybe = UNSET
    compute_capability: Text | _Maybe = UNSET
    clocks_mhz: Clocks | UnsetType = UNSET
    persistence_mode: bool | _Maybe = UNSET
    ecc_enabled: bool | _Maybe = UNSET


class GpusPart(Record, frozen=True, kw_only=True):
    available: bool | UnsetType = UNSET
    reason: Text | UnsetType = UNSET
    devices: tuple[GpuDevice, ...] = ()
    source: Text | UnsetType = UNSET


Packages = dict[str, Text | Unavailable | None]


class PythonPart(Record, frozen=True, kw_only=True):
    """One interpreter's Python and package versions (manifest/environment.collect_python)."""

    available: bool
    reason: Text | UnsetType = UNSET
    python: Text | UnsetType = UNSET
    executable: Text | UnsetType = UNSET
    packages: Packages | UnsetType = UNSET


class GitPart(Record, frozen=True, kw_only=True):
    available: bool
    reason: Text | UnsetType = UNSET
    commit: Text | UnsetType = UNSET
    dirty: bool | UnsetType = UNSET


class SourcePart(Record, frozen=True, kw_only=True):
    """hashing.source_digest: the package's .py files as they ran."""

    available: bool | UnsetType = UNSET
    reason: Text | UnsetType = UNSET
    sha256: Text | UnsetType = UNSET
    files: Count | UnsetType = UNSET
    skipped: Count | UnsetType = UNSET
    method: Text | UnsetType = UNSET
    root: Text | UnsetType = UNSET


class EnvironmentRecord(Record, frozen=True, kw_only=True):
    """environment.json (manifest/environment.py): what each collector saw, or why it saw nothing.

    `backends` maps a backend to its interpreter's part, or is {"available": false, "reason"} when
    no backend interpreter was given (so its values are a part, or that flag and reason);
    `container_images` quotes what the docker daemon described of each image.
    """

    format_version: int | None = None  # None: no environment.json, or an unreadable one
    host: HostPart | UnsetType = UNSET
    cpu: CpuPart | UnsetType = UNSET  # format 2 on
    gpus: GpusPart | UnsetType = UNSET
    orchestrator_python: PythonPart | UnsetType = UNSET
    backends: dict[str, PythonPart | Text | bool] | UnsetType = UNSET
    container_images: dict[str, Quoted] | UnsetType = UNSET
    project_git: GitPart | UnsetType = UNSET
    project_source: SourcePart | UnsetType = UNSET
    recipe_sha256: Text | _Maybe = UNSET
    gpu_override: RecordedGpuOverride | UnsetType = UNSET

    @classmethod
    def from_json(cls, data: object, where: str = "environment.json") -> EnvironmentRecord:
        return decode(data, cls, where)

    @classmethod
    def from_parts(cls, format_version: int, parts: dict[str, object]) -> EnvironmentRecord:
        """What the collectors saw (manifest/environment.collect_environment): a part of another shape
        than its type, or of an unknown name, is recorded as unavailable, with why (capture never
        stops a study)."""
        checked: dict[str, object] = {}
        for name, part in parts.items():
            try:
                decode({name: part}, cls, "environment.json")
                checked[name] = part
            except EvidenceError as exc:
                checked[name] = Unavailable(reason=f"collected in another shape ({exc})"[:500]).to_json()
        return cls.from_json({"format_version": format_version, **checked})

    def with_gpu_override(self, declared: RecordedGpuOverride) -> EnvironmentRecord:
        """The record with the GPU override the study was given (host/override.py's declared record)."""
        return msgspec.structs.replace(self, gpu_override=declared)

    @property
    def gpu_devices(self) -> tuple[GpuDevice, ...]:
        return () if isinstance(self.gpus, UnsetType) else tuple(self.gpus.devices)

    @property
    def override(self) -> RecordedGpuOverride | None:
        return None if isinstance(self.gpu_override, UnsetType) else self.gpu_override

    @property
    def cpu_model(self) -> str | None:
        if isinstance(self.host, UnsetType) or not isinstance(self.host.cpu_model, str):
            return None
        return self.host.cpu_model

    def gpu_names(self, uuid: str | None) -> list[str]:
        """The distinct names of the GPUs listed (only the one with `uuid`, when given), sorted."""
        return sorted({d.name for d in self.gpu_devices if d.name and (uuid is None or d.uuid == uuid)})

    @property
    def run_time_uuid(self) -> str | None:
        """The GPU the run used when it overrode the recipe's pin."""
        return self.override.run_time.uuid if self.override is not None else None

    def backend_packages(self, name: str) -> dict[str, str | None] | None:
        """Package versions of backend `name`'s interpreter as probed (None: not probed); a package
        not installed reads None."""
        part = None if isinstance(self.backends, UnsetType) else self.backends.get(name)
        if not isinstance(part, PythonPart) or isinstance(part.packages, UnsetType):
            return None
        return {package: v if isinstance(v, str) else None for package, v in part.packages.items()}

    @property
    def project_ref(self) -> ProjectRef:
        commit, dirty, sha = self.project
        return ProjectRef(commit=commit, dirty=dirty, source_sha256=sha)

    @property
    def project(self) -> tuple[str | None, bool | None, str | None]:
        """(git commit, dirty flag, digest of the package's source files) of the code the study ran."""
        git, source = self.project_git, self.project_source
        commit = None if isinstance(git, UnsetType) or isinstance(git.commit, UnsetType) else git.commit
        dirty = None if isinstance(git, UnsetType) or isinstance(git.dirty, UnsetType) else git.dirty
        sha = None if isinstance(source, UnsetType) or isinstance(source.sha256, UnsetType) else source.sha256
        return commit, dirty, sha


def environment_of(run: RunDir) -> EnvironmentRecord:
    """environment.json's record; empty when absent or unreadable (a newer format is still refused)."""
    try:
        return _read(run, "environment.json", EnvironmentRecord) or EnvironmentRecord()
    except UnsupportedFormat:
        raise
    except (OSError, ValueError, EvidenceError):
        return EnvironmentRecord()


# --- backends.json ---------------------------------------------------------------------


class HardwareFigures(Record, frozen=True, kw_only=True):
    """What a backend measured on its GPU before serving (`--measure-hardware`)."""

    available: bool | UnsetType = UNSET  # False (with a reason): not measured
    reason: Text | UnsetType = UNSET
    copy_tbps: Number = 0
    matmul_bf16_tflops: Number = 0
    gpu_name: Text | UnsetType = msgspec.field(default=UNSET, name="gpu")
    copy_bytes: Count | UnsetType = UNSET
    matmul_shape: list[Count] | UnsetType = UNSET
    method: Text | UnsetType = UNSET

    @property
    def gpu(self) -> str:
        return self.gpu_name if isinstance(self.gpu_name, str) else "its GPU"

    @property
    def measured(self) -> bool:
        return self.copy_tbps > 0 and self.matmul_bf16_tflops > 0


class CudaGraphs(Record, frozen=True, kw_only=True):
    capacity: Count
    retained: Count | UnsetType = UNSET
    captures: Count | UnsetType = UNSET
    replays: Count | UnsetType = UNSET
    evictions: Count | UnsetType = UNSET


Autotune = dict[str, dict[str, Text]]  # kernel -> its key -> the configuration chosen


class BackendFacts(Record, frozen=True, kw_only=True):
    """One backend's /health facts after readiness, as backends.json records them (runner.IDENTITY_KEYS).

    A key the backend's /health did not hold, or held in another shape, is absent (the whole
    /health is in logs/<backend>.health.json); files written before 2026-12-04 recorded such a
    scalar as {"available": false, "reason": …}.
    """

    fingerprint: Text | Unavailable | UnsetType = msgspec.field(default=UNSET, name="weights_fingerprint")
    weights_fingerprint_scope: Text | Unavailable | UnsetType = UNSET
    merged: Text | Unavailable | None | UnsetType = msgspec.field(default=UNSET, name="merged_weights_fingerprint")
    weights_fingerprint_seconds: Number | Unavailable | UnsetType = UNSET
    weights_bytes: Count | Unavailable | UnsetType = UNSET
    mode: Text | Unavailable | UnsetType = UNSET
    device: Text | Unavailable | UnsetType = UNSET
    dtype: Text | Unavailable | UnsetType = UNSET
    lora: Text | Unavailable | None | UnsetType = UNSET
    implementations: dict[str, Text | Count | list[Text] | None] | UnsetType = UNSET
    torch_threads: Count | Unavailable | UnsetType = UNSET
    torch_interop_threads: Count | Unavailable | UnsetType = UNSET
    thread_env: dict[str, Text | None] | UnsetType = UNSET
    base_model: Text | Unavailable | None | UnsetType = UNSET
    cuda_graphs: CudaGraphs | None | UnsetType = UNSET
    compiled: Text | Unavailable | None | UnsetType = UNSET
    hardware: HardwareFigures | None | UnsetType = UNSET
    parameters: Count | Unavailable | None | UnsetType = msgspec.field(default=UNSET, name="non_embedding_parameters")
    prompt_format: Text | Unavailable | UnsetType = UNSET
    kernels: dict[str, Text] | UnsetType = UNSET
    packages: dict[str, Text | None] | UnsetType = UNSET
    source_sha256: Text | Unavailable | UnsetType = UNSET
    autotune_after_passes: Autotune | UnsetType = UNSET
    runtime_identity: RuntimeIdentity | UnsetType = UNSET  # issue 39: what the process loaded (absent: none reported)

    @classmethod
    def from_health(cls, health: dict[str, object], keys: tuple[str, ...]) -> BackendFacts:
        """The facts of a backend's /health (`keys` of it): a key absent, or of another shape, stays absent."""
        kept: dict[str, object] = {}
        for key in keys:
            if key in health:
                try:
                    decode({key: health[key]}, cls, "/health")
                    kept[key] = health[key]
                except EvidenceError:
                    continue
        return decode(kept, cls, "/health")

    @property
    def weights_fingerprint(self) -> str | None:
        return self.fingerprint if isinstance(self.fingerprint, str) else None

    @property
    def merged_weights_fingerprint(self) -> str | None:
        """A string only when the backend merged its adapter."""
        return self.merged if isinstance(self.merged, str) else None

    @property
    def non_embedding_parameters(self) -> int | None:
        return self.parameters if isinstance(self.parameters, int) and self.parameters > 0 else None

    @property
    def cuda_graph_capacity(self) -> int | None:
        """Set when the backend replays CUDA Graphs."""
        return self.cuda_graphs.capacity if isinstance(self.cuda_graphs, CudaGraphs) else None

    @property
    def floor_figures(self) -> tuple[HardwareFigures, int] | None:
        """(hardware, non-embedding parameters) when the backend measured both; the floor needs them."""
        hardware, parameters = self.hardware, self.non_embedding_parameters
        if not isinstance(hardware, HardwareFigures) or not hardware.measured or parameters is None:
            return None
        return hardware, parameters


class BackendsRecord(Record, frozen=True, kw_only=True):
    """backends.json: per backend (by name, in the file's order) what it reported once ready."""

    format_version: int | UnsetType = UNSET  # absent: no backends.json
    source: Text | UnsetType = UNSET
    backends: dict[str, BackendFacts] = msgspec.field(default_factory=dict)

    @classmethod
    def from_json(cls, data: object, where: str = "backends.json") -> BackendsRecord:
        return decode(data, cls, where)

    @classmethod
    def started(cls) -> BackendsRecord:
        return cls(format_version=BACKENDS_FORMAT_VERSION, source="/health after ready")

    def with_entry(self, name: str, entry: BackendFacts) -> BackendsRecord:
        """The record with backend `name`'s entry set (added, or replaced in its place)."""
        return msgspec.structs.replace(self, backends={**self.backends, name: entry})

    def fingerprints(self) -> dict[str, str | None]:
        return {name: facts.weights_fingerprint for name, facts in self.backends.items()}


def backends_of(run: RunDir) -> BackendsRecord:
    """backends.json's record; empty for a run without one."""
    return _read(run, "backends.json", BackendsRecord) or BackendsRecord()


# --- inputs.json -------------------------------------------------------------------------


class InputEntry(Record, frozen=True, kw_only=True):
    """One declared input checked by sha256 (study/inputs.InputCheck)."""

    path: Text
    role: Text
    expected: Text
    actual: Text | None
    size: Count | None
    status: Text  # ok | missing | mismatch | unpinned | ...


class InputsRecord(Record, frozen=True, kw_only=True):
    format_version: int = INPUTS_FORMAT_VERSION
    root: Text
    files: list[InputEntry]

    @classmethod
    def from_json(cls, data: object, where: str = "inputs.json") -> InputsRecord:
        return decode(data, cls, where)


def inputs_of(run: RunDir) -> InputsRecord | None:
    return _read(run, "inputs.json", InputsRecord)


# --- processes.json ----------------------------------------------------------------------


class HostPort(Record, frozen=True, kw_only=True):
    HostIp: Text | UnsetType = UNSET
    HostPort: Text | UnsetType = UNSET


class ProcessBinding(Record, frozen=True, kw_only=True):
    """How a process was bound: the local runtime's command prefix, or a container's settings."""

    prefix: list[Text] | UnsetType = UNSET
    container_id: Text | UnsetType = UNSET
    image_id: Text | None | UnsetType = UNSET
    cpuset_cpus: Text | None | UnsetType = UNSET
    cpuset_mems: Text | None | UnsetType = UNSET
    gpu_uuids: list[Text] | UnsetType = UNSET
    ports: dict[str, list[HostPort] | None] | UnsetType = UNSET
    argv_in_container: list[Text] | UnsetType = UNSET
    read_only_mounts: list[Text] | UnsetType = UNSET


class ExitEntry(Record, frozen=True, kw_only=True):
    """How a started process ended (runtime.ExitRecord)."""

    name: Text
    runtime: Text
    ident: Text
    exit_status: Int64 | None
    signal: Text | None = None
    stopped_by_us: bool = False
    killed: bool = False
    intentional: bool = False
    exited: bool = True
    binding: ProcessBinding = ProcessBinding()
    launched: bool | UnsetType = UNSET  # absent before 2026-12: every process was launched

    @property
    def was_launched(self) -> bool:
        return self.launched is not False


class ProcessesRecord(Record, frozen=True, kw_only=True):
    format_version: int = PROCESSES_FORMAT_VERSION
    processes: tuple[ExitEntry, ...] = ()

    @classmethod
    def from_json(cls, data: object, where: str = "processes.json") -> ProcessesRecord:
        return decode(data, cls, where)


def processes_of(run: RunDir) -> ProcessesRecord:
    return _read(run, "processes.json", ProcessesRecord) or ProcessesRecord()


# --- servers.json ------------------------------------------------------------------------


class ReadinessEntry(Record, frozen=True, kw_only=True):
    kind: Text
    url: Text
    answer: Text
    attempts: Count
    seconds: Number


class Connections(Record, frozen=True, kw_only=True):
    """A backend's connections over the study (study/load_levels.merged_connections of its clients)."""

    connections_opened: Count
    closed_by_server: Count
    reconnected_requests: Count
    http_versions: list[Text]
    requests: Count


class ServerEntry(Record, frozen=True, kw_only=True):
    """servers.json's entry of a backend: launched or reached, readiness, connections."""

    launched: bool
    owned: bool
    url: Text | None
    readiness_kind: Text
    health: Text | None
    endpoint: Text
    model: Text | None
    readiness: ReadinessEntry | None = None
    connections: Connections | None = None
    # X-Queue-Time-Ms values that were no queue time (over the request's own latency, not finite): the
    # rows hold them as absent (study/sender.queue_time_ms); written only when there were any.
    queue_times_refused: Count | UnsetType = UNSET


class ServersRecord(Record, frozen=True, kw_only=True):
    format_version: int = SERVERS_FORMAT_VERSION
    backends: dict[str, ServerEntry] = msgspec.field(default_factory=dict)

    @classmethod
    def from_json(cls, data: object, where: str = "servers.json") -> ServersRecord:
        return decode(data, cls, where)

    def with_entry(self, name: str, entry: ServerEntry) -> ServersRecord:
        return msgspec.structs.replace(self, backends={**self.backends, name: entry})


def servers_of(run: RunDir) -> ServersRecord | None:
    """servers.json's record; None for runs from before it (2026-12)."""
    return _read(run, "servers.json", ServersRecord)


# --- environment_check.json ----------------------------------------------------------------


class ReportedEnvironment(Record, frozen=True, kw_only=True):
    """What a backend must report once ready (the recipe's `environment`), or what it reported."""

    weights_fingerprint: Text | None | UnsetType = UNSET
    dtype: Text | None | UnsetType = UNSET
    implementations: dict[str, Text | None] | None | UnsetType = UNSET
    packages: dict[str, Text | None] | None | UnsetType = UNSET
    source_sha256: Text | None | UnsetType = UNSET
    triton_cache: TritonCacheRef | UnsetType = UNSET


class TritonCacheEntry(Record, frozen=True, kw_only=True):
    """A pinned Triton cache after its backend stopped: whether the backend changed its copy."""

    dir: Text
    sha256: Text
    after_sha256: Text
    unchanged: bool
    note: Text


class BackendCheck(Record, frozen=True, kw_only=True):
    declared: ReportedEnvironment
    observed: ReportedEnvironment
    differences: list[Text]


class ProjectRef(Record, frozen=True, kw_only=True):
    commit: Text | None
    dirty: bool | None
    source_sha256: Text | None


class EnvironmentCheckRecord(Record, frozen=True, kw_only=True):
    """environment_check.json (orchestrator/environment_check.py): each backend's reported environment
    against the recipe's, once ready."""

    format_version: int = 1
    allow_drift: bool
    project: ProjectRef
    backends: dict[str, BackendCheck] = msgspec.field(default_factory=dict)
    differences: tuple[Text, ...] = ()
    triton_cache: dict[str, TritonCacheEntry] | UnsetType = UNSET

    @classmethod
    def from_json(cls, data: object, where: str = "environment_check.json") -> EnvironmentCheckRecord:
        return decode(data, cls, where)


def environment_check_of(run: RunDir) -> EnvironmentCheckRecord | None:
    return _read(run, "environment_check.json", EnvironmentCheckRecord)


# --- calibration.json ----------------------------------------------------------------------


class CalibrationRecord(Record, frozen=True, kw_only=True):
    """calibration.json (bench/calibration.py): the timed client's overhead on loopback, and the
    timing boundary every latency of the run shares."""

    n: Count
    p50_us: Number
    p99_us: Number
    mean_us: Number
    min_us: Number
    connections_opened: Count
    load_average_1m: Number
    method: Text
    timing_boundary: Text

    @classmethod
    def from_json(cls, data: object, where: str = "calibration.json") -> CalibrationRecord:
        return decode(data, cls, where)


def calibration_of(run: RunDir) -> CalibrationRecord | None:
    path = run.file("calibration.json")
    return CalibrationRecord.from_json(run.read_unversioned("calibration.json"), str(path)) if path.is_file() else None


# --- responses/<backend>.jsonl ----------------------------------------------------------------


class ResponseEntry(Record, frozen=True, kw_only=True):
    """One line of responses/<backend>.jsonl: the body of one row's response (never published).

    `body` holds a UTF-8 body as text, `body_base64` any other; a failed request has neither. Format 1
    lines carry no version (`v`); `rundir.check_response_entry` refuses a later one."""

    backend: Text
    workload: Text
    phase: Text
    pass_index: Count
    seq: Count
    id: Text
    body: str | UnsetType = UNSET
    body_base64: str | UnsetType = UNSET

    @classmethod
    def of(cls, backend: str, workload: str, phase: str, pass_index: int, seq: int, case: str,
           body: bytes | None) -> ResponseEntry:
        entry = cls(backend=backend, workload=workload, phase=phase, pass_index=pass_index, seq=seq, id=case)
        if body is None:
            return entry
        try:
            return msgspec.structs.replace(entry, body=body.decode("utf-8"))
        except UnicodeDecodeError:
            return msgspec.structs.replace(entry, body_base64=base64.b64encode(body).decode("ascii"))

    def line(self) -> str:
        """The JSONL line (Python's JSON writer, keys sorted, as every format-1 line was written)."""
        return json.dumps(self.to_json(), sort_keys=True) + "\n"


# --- plan.json (the record is in plan.py, beside the recipe's models it holds) ------------


def plan_of(run: RunDir) -> Plan | None:
    """plan.json's record (the plan as planned, with the run-only fields), None for a run without one."""
    from .plan import Plan  # the recipe's pydantic models: loaded where a plan is read, not with every record

    path = run.file("plan.json")
    return Plan.from_json(run.read("plan.json"), str(path)) if path.is_file() else None


# --- import.json ---------------------------------------------------------------------------


class PublishedStudy(Record, frozen=True, kw_only=True):
    """What imported evidence says about its own study (quoted, never ours)."""

    date: Text | None = None
    hardware: tuple[Text, ...] = ()  # "key: value" lines, e.g. "gpu: NVIDIA H200"
    arms: dict[str, Text] = msgspec.field(default_factory=dict)  # arm -> its published description
    hypothesis: Text | None = None
    independent_variable: Text | None = None

    def hardware_value(self, *keys: str) -> list[str]:
        """The values of the hardware lines whose key is one of `keys`, in order."""
        return [h.split(": ", 1)[1] for h in self.hardware if ": " in h and h.split(": ", 1)[0] in keys]


class PublishedGate(Record, frozen=True, kw_only=True):
    name: Text
    outcome: bool | None  # True (passed), False (failed), None (not published)
    criterion_text: Text | None = msgspec.field(default=None, name="criterion")

    @property
    def criterion(self) -> str:
        return self.criterion_text or ""


class Normalization(Record, frozen=True, kw_only=True):
    path: Text
    note: Text
    present: bool


class FigureCounts(Record, frozen=True, kw_only=True):
    """How the published figures compared with the imported rows (results/imported.figure_counts)."""

    compared: Count
    exact: Count
    within_rounding: Count
    mismatch: Count
    not_compared: Count
    largest_within_rounding_difference: Number | None


class ImportRecord(Record, frozen=True, kw_only=True):
    """import.json (audit/imports/): another project's evidence, converted, and what it publishes.

    The documents it quotes from the source (their manifest's entries and metadata, their summary,
    cleanup and per-arm records, the figures compared) are `Quoted`: kept as published, read by
    the figure and cleanup lines (results/imported.py) as whole documents.
    """

    format_version: int
    format: Text
    source: Text
    evidence_folder: Text = ""
    signed: bool = False
    measured_by_us: bool = False
    provenance: Text = "verified"  # "verified" against their digests file, or why not
    digests_file: Text | None = "manifest.json"
    files_verified: Count
    verified: tuple[Text, ...] = ()
    absent: tuple[Text, ...] = ()  # listed in their manifest but not present
    source_manifest: dict[str, Quoted] = msgspec.field(default_factory=dict)
    source_manifest_meta: dict[str, Quoted] = msgspec.field(default_factory=dict)
    normalization: list[Normalization] | UnsetType = UNSET
    imported_files: dict[str, Text] | UnsetType = UNSET
    rows: Count
    converted: dict[str, Text] = msgspec.field(default_factory=dict)
    figures: tuple[dict[str, Quoted], ...] = ()
    figure_counts: FigureCounts | UnsetType = UNSET
    readiness: dict[str, Quoted] | UnsetType = UNSET
    first_inference: dict[str, Quoted] | UnsetType = UNSET
    cleanup: dict[str, Quoted] | UnsetType = UNSET
    published: dict[str, Quoted] | UnsetType = UNSET
    published_summary: Quoted | UnsetType = UNSET
    study: PublishedStudy = PublishedStudy()
    published_gates: tuple[PublishedGate, ...] = ()
    notes: tuple[Text, ...] = ()

    @classmethod
    def from_json(cls, data: object, where: str = "import.json") -> ImportRecord:
        return decode(data, cls, where)

    @property
    def conclusion(self) -> Quoted:
        return None if isinstance(self.published, UnsetType) else self.published.get("conclusion")

    @property
    def cleanup_quoted(self) -> dict[str, Quoted]:
        return {} if isinstance(self.cleanup, UnsetType) else self.cleanup


def import_of(run: RunDir) -> ImportRecord | None:
    """import.json's record, None for a run that was not imported."""
    return _read(run, "import.json", ImportRecord)

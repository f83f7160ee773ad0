"""Typed records of a run's JSON files, read from the dicts their writers wrote.

    StateRecord         state.json        status (a `Status` word), steps, error, owner, start time
    HostRecord          host.json         the GPU override (what the report states of host.json)
    EnvironmentRecord   environment.json  GPU devices, the GPU override, the CPU model
    BackendsRecord      backends.json     per backend: weights fingerprints, threads, measured hardware
    ImportRecord        import.json       where imported evidence came from, what the published study says
    GpuOverride, GpuRef, GpuDevice, BackendFacts, HardwareFigures, PublishedStudy, PublishedGate: their parts

Each record has the file's `format_version` and `from_json(data)`, which reads every version
this tool reads (`rundir.READABLE_VERSIONS`; the caller has checked it, e.g. `RunDir.read`)
and every older file of that version: a field an older writer did not write, or wrote with
another shape, reads as None (the report then prints what it printed for such a file, so the
committed reports re-render byte for byte). The writers build these records and write
`to_json()` through `files.write_json_atomic`; keys a record does not name travel in its
`extra` (or, for environment.json, its `parts`), so `from_json(data).to_json() == data` and no
file's bytes change.

`state_of`, `host_of`, `environment_of`, `backends_of` and `import_of` read them from a run directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import EvidenceError, UnsupportedFormat
from .rundir import RunDir
from .state import StateRecord

__all__ = [
    "BackendFacts",
    "BackendsRecord",
    "EnvironmentRecord",
    "GpuDevice",
    "GpuOverride",
    "GpuRef",
    "HardwareFigures",
    "HostRecord",
    "ImportRecord",
    "PublishedGate",
    "PublishedStudy",
    "StateRecord",
    "backends_of",
    "environment_of",
    "host_of",
    "import_of",
    "state_of",
]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# --- state.json (the record is in state.py, beside Status) -----------------------------


def state_of(run: RunDir) -> StateRecord:
    """The run's effective state: a "running" state whose study has died reads as incomplete."""
    return StateRecord.from_json(run.effective_state())


# --- the GPU override (host.json and environment.json) ----------------------------------


@dataclass(frozen=True)
class GpuRef:
    index: int | None
    uuid: str | None

    @classmethod
    def from_json(cls, data: Any) -> GpuRef:
        data = _mapping(data)
        return cls(data.get("index"), data.get("uuid"))


@dataclass(frozen=True)
class GpuOverride:
    """A run on another GPU than the recipe pins (issue 11): where it ran, what the recipe says, who said so."""

    source: str | None
    recipe: GpuRef
    run_time: GpuRef

    @classmethod
    def from_json(cls, data: Any) -> GpuOverride | None:
        if not isinstance(data, Mapping):
            return None
        return cls(data.get("source"), GpuRef.from_json(data.get("recipe")), GpuRef.from_json(data.get("run_time")))


_HOST_NAMED = frozenset({"format_version", "reservation", "device", "binding", "cleanup", "memory", "controlled",
                         "gpu_override", "slurm"})


@dataclass(frozen=True)
class HostRecord:
    """host.json (openjev_repro.host.session), what the host session writes; its parts as written.

    reservation, device, binding, cleanup and memory are always written (null when the study did
    not use them); controlled, gpu_override and slurm only when the writer knew them.
    """

    reservation: Any = None
    device: Any = None
    binding: Any = None
    cleanup: Any = None  # {"passed": bool, ...} when a GPU was controlled
    memory: Any = None
    controlled: bool | None = None
    override: Any = None  # gpu_override as written; `gpu_override` reads it
    slurm: Any = None
    format_version: int = 1
    extra: dict[str, Any] = field(default_factory=dict)  # keys a later writer adds

    @classmethod
    def from_json(cls, data: Any) -> HostRecord:
        data = _mapping(data)
        controlled = data.get("controlled")
        return cls(data.get("reservation"), data.get("device"), data.get("binding"), data.get("cleanup"),
                   data.get("memory"), controlled if isinstance(controlled, bool) else None,
                   data.get("gpu_override"), data.get("slurm"), int(data.get("format_version", 1)),
                   {key: value for key, value in data.items() if key not in _HOST_NAMED})

    def to_json(self) -> dict[str, Any]:
        """The dict host.json holds."""
        optional = {"controlled": self.controlled, "gpu_override": self.override, "slurm": self.slurm}
        return {**self.extra, "format_version": self.format_version, "reservation": self.reservation,
                "device": self.device, "binding": self.binding, "cleanup": self.cleanup, "memory": self.memory,
                **{key: value for key, value in optional.items() if value is not None}}

    @property
    def gpu_override(self) -> GpuOverride | None:
        """The GPU override (issue 11), None when the run used the recipe's GPU."""
        return GpuOverride.from_json(self.override)


def host_of(run: RunDir) -> HostRecord | None:
    """host.json's record, None for a run without one."""
    return HostRecord.from_json(run.read("host.json")) if run.file("host.json").is_file() else None


# --- environment.json ------------------------------------------------------------------


@dataclass(frozen=True)
class GpuDevice:
    name: str | None
    uuid: str | None


@dataclass(frozen=True)
class EnvironmentRecord:
    """environment.json (manifest/environment.py): each collector's part as written, and the parts a report states.

    `parts` maps a collector's name (host, cpu, gpus, orchestrator_python, backends, container_images,
    project_git, project_source, recipe_sha256) to what it saw or why it saw nothing, plus
    `gpu_override` when the run overrode the recipe's GPU.
    """

    parts: dict[str, Any] = field(default_factory=dict)
    format_version: int | None = None  # None: no environment.json, or an unreadable one

    @classmethod
    def from_json(cls, data: Any) -> EnvironmentRecord:
        data = _mapping(data)
        return cls({key: value for key, value in data.items() if key != "format_version"}, data.get("format_version"))

    def to_json(self) -> dict[str, Any]:
        """The dict environment.json holds."""
        return {"format_version": self.format_version, **self.parts}

    def with_gpu_override(self, declared: Any) -> EnvironmentRecord:
        """The record with the GPU override the study was given (host/override.py's declared record)."""
        return EnvironmentRecord({**self.parts, "gpu_override": declared}, self.format_version)

    @property
    def gpu_devices(self) -> tuple[GpuDevice, ...]:
        devices = _mapping(self.parts.get("gpus")).get("devices") or []
        return tuple(GpuDevice(d.get("name"), d.get("uuid")) for d in devices if isinstance(d, Mapping))

    @property
    def gpu_override(self) -> GpuOverride | None:
        return GpuOverride.from_json(self.parts.get("gpu_override"))

    @property
    def cpu_model(self) -> str | None:
        return _mapping(self.parts.get("host")).get("cpu_model")

    def gpu_names(self, uuid: str | None) -> list[str]:
        """The distinct names of the GPUs listed (only the one with `uuid`, when given), sorted."""
        return sorted({d.name for d in self.gpu_devices if d.name and (uuid is None or d.uuid == uuid)})

    @property
    def run_time_uuid(self) -> str | None:
        """The GPU the run used when it overrode the recipe's pin."""
        override = self.gpu_override
        return override.run_time.uuid if override is not None else None


def environment_of(run: RunDir) -> EnvironmentRecord:
    """environment.json's record; empty when absent or unreadable (a newer format is still refused)."""
    try:
        return EnvironmentRecord.from_json(run.read("environment.json")) if run.file("environment.json").is_file() \
            else EnvironmentRecord()
    except UnsupportedFormat:
        raise
    except (OSError, ValueError, EvidenceError):
        return EnvironmentRecord()


# --- backends.json ---------------------------------------------------------------------


@dataclass(frozen=True)
class HardwareFigures:
    """What a backend measured on its GPU before serving (`--measure-hardware`)."""

    copy_tbps: float
    matmul_bf16_tflops: float
    gpu: Any = "its GPU"  # the GPU's name as the backend reported it

    @classmethod
    def from_json(cls, data: Any) -> HardwareFigures | None:
        """The figures when both rates are positive numbers; None otherwise (not measured, or unavailable)."""
        data = _mapping(data)
        copy, rate = _number(data.get("copy_tbps")), _number(data.get("matmul_bf16_tflops"))
        if copy is None or rate is None or copy <= 0 or rate <= 0:
            return None
        return cls(float(copy), float(rate), data.get("gpu", "its GPU"))


@dataclass(frozen=True)
class BackendFacts:
    """One backend's /health facts after readiness, as backends.json records them."""

    weights_fingerprint: str | None = None
    merged_weights_fingerprint: str | None = None  # a string only when the backend merged its adapter
    weights_fingerprint_scope: Any = None
    torch_threads: Any = None
    torch_interop_threads: Any = None
    hardware: HardwareFigures | None = None
    non_embedding_parameters: int | None = None
    cuda_graph_capacity: Any = None  # truthy when the backend replays CUDA Graphs

    @classmethod
    def from_json(cls, data: Any) -> BackendFacts:
        data = _mapping(data)
        parameters = data.get("non_embedding_parameters")
        return cls(weights_fingerprint=_text(data.get("weights_fingerprint")),
                   merged_weights_fingerprint=_text(data.get("merged_weights_fingerprint")),
                   weights_fingerprint_scope=data.get("weights_fingerprint_scope"),
                   torch_threads=data.get("torch_threads"), torch_interop_threads=data.get("torch_interop_threads"),
                   hardware=HardwareFigures.from_json(data.get("hardware")),
                   non_embedding_parameters=parameters if isinstance(parameters, int) and parameters > 0 else None,
                   cuda_graph_capacity=_mapping(data.get("cuda_graphs")).get("capacity"))

    @property
    def floor_figures(self) -> tuple[HardwareFigures, int] | None:
        """(hardware, non-embedding parameters) when the backend measured both; the floor needs them."""
        if self.hardware is None or self.non_embedding_parameters is None:
            return None
        return self.hardware, self.non_embedding_parameters


@dataclass(frozen=True)
class BackendsRecord:
    """backends.json: per backend (by name, in the file's order) what it reported once ready.

    `entries` holds each backend's entry as written (the runner's IDENTITY_KEYS from /health, and
    `autotune_after_passes` when known); `backends` reads them as `BackendFacts`.
    """

    entries: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    format_version: int | None = None  # None: no backends.json
    extra: dict[str, Any] = field(default_factory=dict)  # top-level keys a later writer adds

    @classmethod
    def from_json(cls, data: Any) -> BackendsRecord:
        data = _mapping(data)
        return cls(dict(_mapping(data.get("backends"))), data.get("source"), data.get("format_version"),
                   {key: value for key, value in data.items() if key not in ("backends", "source", "format_version")})

    def to_json(self) -> dict[str, Any]:
        """The dict backends.json holds."""
        optional = {"source": self.source, "format_version": self.format_version}
        return {**self.extra, **{key: value for key, value in optional.items() if value is not None},
                "backends": dict(self.entries)}

    def with_entry(self, name: str, entry: dict[str, Any]) -> BackendsRecord:
        """The record with backend `name`'s entry set (added, or replaced in its place)."""
        return replace(self, entries={**self.entries, name: entry})

    @property
    def backends(self) -> dict[str, BackendFacts]:
        return {name: BackendFacts.from_json(info) for name, info in self.entries.items()}

    @property
    def raw(self) -> dict[str, Any]:
        """The file's content, for readers not typed yet."""
        return self.to_json()


def backends_of(run: RunDir) -> BackendsRecord:
    """backends.json's record; empty for a run without one."""
    return BackendsRecord.from_json(run.read("backends.json")) if run.file("backends.json").is_file() else BackendsRecord()


# --- import.json -----------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedStudy:
    """What imported evidence says about its own study (quoted, never ours)."""

    date: Any = None
    hardware: tuple[str, ...] = ()  # "key: value" lines, e.g. "gpu: NVIDIA H200"
    arms: Mapping[str, Any] = field(default_factory=dict)  # arm -> its published description
    hypothesis: Any = None
    independent_variable: Any = None

    @classmethod
    def from_json(cls, data: Any) -> PublishedStudy:
        data = _mapping(data)
        return cls(data.get("date"), tuple(str(h) for h in data.get("hardware") or ()), _mapping(data.get("arms")),
                   data.get("hypothesis"), data.get("independent_variable"))

    def hardware_value(self, *keys: str) -> list[str]:
        """The values of the hardware lines whose key is one of `keys`, in order."""
        return [h.split(": ", 1)[1] for h in self.hardware if ": " in h and h.split(": ", 1)[0] in keys]


@dataclass(frozen=True)
class PublishedGate:
    name: Any
    outcome: Any  # True (passed), False (failed), None (not published); anything else is not ours to read
    criterion: str = ""

    @classmethod
    def from_json(cls, data: Any) -> PublishedGate:
        data = _mapping(data)
        return cls(data.get("name"), data.get("outcome"), str(data.get("criterion") or ""))


@dataclass(frozen=True)
class ImportRecord:
    """import.json (audit/importer.py): another project's evidence, converted, and what it publishes.

    `raw` is the file's content, for the figure and cleanup lines (results/imported.py) that read it whole.
    """

    source: Any = None
    format: Any = "unknown"
    evidence_folder: str = ""
    provenance: Any = "verified"  # "verified" against their digests file, or why not
    files_verified: Any = "?"
    digests_file: str = "manifest.json"
    absent: tuple[Any, ...] = ()  # listed in their manifest but not present
    cleanup: Mapping[str, Any] = field(default_factory=dict)
    conclusion: Any = None
    study: PublishedStudy = field(default_factory=PublishedStudy)
    published_gates: tuple[PublishedGate, ...] = ()
    format_version: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> ImportRecord:
        data = _mapping(data)
        return cls(source=data.get("source"), format=data.get("format", "unknown"),
                   evidence_folder=data.get("evidence_folder") or "", provenance=data.get("provenance", "verified"),
                   files_verified=data.get("files_verified", "?"), digests_file=data.get("digests_file") or "manifest.json",
                   absent=tuple(data.get("absent") or ()), cleanup=_mapping(data.get("cleanup")),
                   conclusion=_mapping(data.get("published")).get("conclusion"),
                   study=PublishedStudy.from_json(data.get("study")),
                   published_gates=tuple(PublishedGate.from_json(g) for g in data.get("published_gates") or ()),
                   format_version=data.get("format_version"), raw=data)


def import_of(run: RunDir) -> ImportRecord | None:
    """import.json's record, None for a run that was not imported."""
    return ImportRecord.from_json(run.read("import.json")) if run.file("import.json").is_file() else None

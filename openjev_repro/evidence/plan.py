"""plan.json's record: what `invoke plan` prints and `invoke study` will do, as typed values.

`study.plan.resolve_plan` returns a `Plan`; `invoke plan` prints its attributes, `invoke plan
--json` prints `Plan.to_json()`, and the runner writes that same dict to plan.json (with the
run-only fields beside it), so plan.json holds exactly what was planned. The recipe's own
models (Study, Controls, Protocol, Pins, gates, downloads, sources) are kept as they are:
`to_json` dumps them as `model_dump(mode="json")` did before this record, so the bytes of
plan.json do not change.

plan format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .recipe import Controls, Download, Gate, Pins, Protocol, Source, Study, Warmup

__all__ = [
    "PLAN_FORMAT_VERSION",
    "PinCheck",
    "Plan",
    "PlanAction",
    "PlanBackend",
    "PlanHash",
    "PlanPreparation",
    "PlanProcess",
    "PlanSequence",
    "PlanStep",
    "PlanTraces",
]

PLAN_FORMAT_VERSION = 1


@dataclass(frozen=True)
class PlanProcess:
    """One process of a launched backend: its filled argv and env (launch-time placeholders left in)."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    health: str | None
    port: int | str | None = None  # an aux process's port (or "free ({port.NAME})"); None for the command
    ready_timeout_s: float | None = None  # an aux process's readiness limit

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "argv": list(self.argv), "env": dict(self.env), "health": self.health}
        if self.port is not None:  # an aux process
            out.update(port=self.port, ready_timeout_s=self.ready_timeout_s)
        return out


@dataclass(frozen=True)
class PlanBackend:
    """How one backend is reached: launched (and owned) by the study, or a running server at `url`."""

    name: str
    runtime: str
    image: str | None
    description: str | None
    aux: tuple[PlanProcess, ...]
    command: PlanProcess
    endpoint: str
    model: str | None
    url: str | None
    readiness: str
    health: str | None
    cwd: str | None
    environment: Mapping[str, Any] | None = None  # what the backend must report once ready, when declared
    headers_from_env: Mapping[str, str] | None = None  # a url backend's header -> variable names (never values)

    @property
    def launched(self) -> bool:
        return self.url is None

    @property
    def start_order(self) -> list[str]:
        return [a.name for a in self.aux] + ["command"]

    @property
    def stop_order(self) -> list[str]:
        return ["command"] + [a.name for a in self.aux][::-1]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "runtime": self.runtime, "image": self.image, "description": self.description,
            "start_order": self.start_order, "stop_order": self.stop_order, "aux": [a.to_json() for a in self.aux],
            "command": self.command.to_json(), "endpoint": self.endpoint, "model": self.model,
            "launched": self.launched, "owned": self.launched, "url": self.url, "readiness": self.readiness,
            "health": self.health, "cwd": self.cwd}
        if self.environment is not None:
            out["environment"] = dict(self.environment)
        if self.headers_from_env:
            out["headers_from_env"] = dict(self.headers_from_env)
        return out


@dataclass(frozen=True)
class PlanStep:
    """One step of a backend's sequence: first inference, warm-up, or a feasibility or measured pass."""

    phase: str
    workload: str | None = None  # feasibility and measured passes
    index: int | None = None  # their 1-based pass number ("pass" in plan.json)
    detail: str | None = None  # the first inference's sentence
    warmup: Warmup | None = None  # the warm-up step's settings
    level: str | None = None  # a load level's id (workloads with a `load`), e.g. closed-c4
    load: dict[str, Any] | None = None  # how that level loads the backend
    latency_bound_ms: float | None = None  # the workload's goodput bound, when declared

    def label(self) -> str:
        return (self.phase + (f" {self.workload}#{self.index}" if self.workload is not None else "")
                + (f" @{self.level}" if self.level is not None else ""))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"phase": self.phase}
        if self.detail is not None:
            out["detail"] = self.detail
        if self.warmup is not None:
            w = self.warmup
            out.update({"longest_first": w.longest_first, "longest_of": w.longest_of, "requests": w.requests})
        if self.workload is not None:
            out.update({"workload": self.workload, "pass": self.index})
        if self.level is not None:
            out.update({"level": self.level, "load": self.load})
        if self.latency_bound_ms is not None:
            out["latency_bound_ms"] = self.latency_bound_ms
        return out


@dataclass(frozen=True)
class PlanSequence:
    backend: str
    steps: tuple[PlanStep, ...]
    server: str = "one server reused for every pass"

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "server": self.server, "steps": [s.to_json() for s in self.steps]}


@dataclass(frozen=True)
class PlanHash:
    """A file whose sha256 the study verifies before measuring ("unpinned" until the lock pins it)."""

    path: str
    sha256: str
    role: str
    published_sha256: str | None

    @property
    def pinned(self) -> bool:
        return self.sha256 != "unpinned"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "role": self.role, "published_sha256": self.published_sha256}


@dataclass(frozen=True)
class PinCheck:
    field: str  # dotted path in the recipe, e.g. inputs.files.0.sha256
    kind: str  # sha256 | commit | hf_revision | gpu_uuid
    value: str
    status: str  # ok | unpinned

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "kind": self.kind, "value": self.value, "status": self.status}


@dataclass(frozen=True)
class PlanAction:
    """A preparation step as planned (study.preparation.PrepareAction's fields)."""

    kind: str
    name: str
    detail: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    target: str | None = None
    done: bool = False

    @property
    def shows_command(self) -> bool:
        return bool(self.argv) and self.kind == "command"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail, "argv": list(self.argv),
                "env": dict(self.env or {}), "cwd": self.cwd, "target": self.target, "done": self.done}


@dataclass(frozen=True)
class PlanPreparation:
    lock: str
    downloads: tuple[Download, ...]
    sources: tuple[Source, ...]
    provided: tuple[str, ...]
    actions: tuple[PlanAction, ...]

    def to_json(self) -> dict[str, Any]:
        return {"lock": self.lock, "downloads": [d.model_dump(mode="json") for d in self.downloads],
                "sources": [s.model_dump(mode="json") for s in self.sources], "provided": list(self.provided),
                "actions": [a.to_json() for a in self.actions]}


@dataclass(frozen=True)
class PlanTraces:
    enabled: bool
    items: tuple[Mapping[str, Any], ...] = ()  # study.traces.TraceItem dicts, when enabled
    note: str | None = None  # why items is empty although traces are enabled

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": self.enabled}
        if self.enabled:
            out["items"] = [dict(i) for i in self.items]
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class Plan:
    """The fully resolved plan of a recipe (`study.plan.resolve_plan`); `to_json()` is plan.json's planned part."""

    study: Study
    recipe_path: str
    recipe_sha256: str
    inputs_root: str
    runtime: str | None
    images: tuple[str, ...]
    unpinned: tuple[str, ...]
    preparation: PlanPreparation | None
    hashes: tuple[PlanHash, ...]
    pins_checked: tuple[PinCheck, ...]
    pins: Pins
    controls: Controls
    protocol: Protocol
    backends: tuple[PlanBackend, ...]
    passes: tuple[PlanSequence, ...]
    traces: PlanTraces
    gates: tuple[Gate, ...]
    notes: tuple[str, ...]
    format_version: int = PLAN_FORMAT_VERSION

    @property
    def needs_preparation(self) -> bool:
        return bool(self.unpinned)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "study": self.study.model_dump(mode="json"),
            "recipe": {"path": self.recipe_path, "sha256": self.recipe_sha256},
            "inputs_root": self.inputs_root,
            "runtime": self.runtime,
            "images": list(self.images),
            "needs_preparation": self.needs_preparation,
            "unpinned": list(self.unpinned),
            "preparation": self.preparation.to_json() if self.preparation is not None else None,
            "hashes": [h.to_json() for h in self.hashes],
            "pins": {"checked": [c.to_json() for c in self.pins_checked], **self.pins.model_dump(mode="json")},
            "controls": self.controls.model_dump(mode="json"),
            "protocol": self.protocol.model_dump(mode="json"),
            "backends": [b.to_json() for b in self.backends],
            "passes": [p.to_json() for p in self.passes],
            "traces": self.traces.to_json(),
            "gates": [g.model_dump(mode="json") for g in self.gates],
            "notes": list(self.notes),
        }

"""plan.json's record: what `invoke plan` prints and `invoke study` executes, as typed values.

`study.planner.resolve_plan` returns a `Plan`; `invoke plan` prints its attributes, `invoke plan
--json` prints `Plan.to_json()`, the runner writes that same dict to plan.json (with the run-only
fields `case_ids` and `gpu_override` set) and executes it: per backend its runtime, its processes
(argv and environment filled but for the launch-time placeholders) and its steps.
`Plan.from_json(data)` reads a plan back (a file `invoke plan --out` wrote, a run's plan.json:
`records.plan_of(run)`), so that `Plan.from_json(p.to_json()).to_json() == p.to_json()`.

The recipe's own models (Study, Controls, Protocol, Pins, gates, downloads, sources) are kept as
they are: `to_json` dumps each as `model_dump(mode="json", exclude_unset=True)`, and a plan
resolved from a recipe holds them with every field set, so plan.json holds every field as before
this record, and a plan read back from an older file (one without a field added since) writes
that file's keys again. Every other part is a msgspec `Record` (evidence/decoding.py).

plan format history:
    1  (2026-11) first version. Additive: `environment` per backend (2026-12), load steps'
       `level`, `load` and `latency_bound_ms` (2026-12).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, TypeVar

import msgspec
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..errors import EvidenceError
from .decoding import UNSET, Count, Number, Quoted, Record, Text, TritonCacheRef, UnsetType, decode
from .recipe import Controls, Download, Gate, LoadLevel, Pins, Protocol, Source, Study, Warmup

__all__ = [
    "PLAN_FORMAT_VERSION",
    "RUN_ONLY_FIELDS",
    "DeclaredEnvironment",
    "PinCheck",
    "Plan",
    "PlanAction",
    "PlanBackend",
    "PlanGpuOverride",
    "PlanHash",
    "PlanLoad",
    "PlanPreparation",
    "PlanProcess",
    "PlanSequence",
    "PlanStep",
    "PlanTraces",
    "PlannedTrace",
    "every_field_set",
]

PLAN_FORMAT_VERSION = 1
RUN_ONLY_FIELDS = ("case_ids", "gpu_override")  # plan.json's fields only a run knows, beside the planned ones
M = TypeVar("M", bound=BaseModel)


class PlanProcess(Record, frozen=True, kw_only=True):
    """One process of a launched backend: its filled argv and env (launch-time placeholders left in)."""

    name: Text
    argv: tuple[Text, ...]
    env: dict[str, Text]
    health: Text | None
    # An aux process's port (or "free ({port.NAME})"); the command's only when the recipe fixes it.
    port: Count | Text | UnsetType = UNSET
    ready_timeout_s: Number | None | UnsetType = UNSET  # an aux process's readiness limit

    @property
    def fixed_port(self) -> int | None:
        """The port the recipe fixes for this aux process, None for a free one (or the command)."""
        return self.port if isinstance(self.port, int) else None


class DeclaredEnvironment(Record, frozen=True, kw_only=True):
    """What a backend must report once ready (the recipe's `environment`, only what it declares)."""

    packages: dict[str, Text] | UnsetType = UNSET
    implementations: dict[str, Text] | UnsetType = UNSET
    dtype: Text | UnsetType = UNSET
    weights_fingerprint: Text | UnsetType = UNSET
    triton_cache: TritonCacheRef | UnsetType = UNSET


class PlanBackend(Record, frozen=True, kw_only=True):
    """How one backend is reached: launched (and owned) by the study, or a running server at `url`.

    `launched`, `owned`, `start_order` and `stop_order` follow from `url` and `aux`; they are
    written for people and checked when a plan is read back (a plan whose orders were edited
    would otherwise say one thing and do another). Plans from before 2026-12 lack url, cwd,
    health, readiness, launched and owned (their backends were launched, ready on /health).
    """

    name: Text
    runtime: Text
    image: Text | None
    description: Text | None
    start_order: tuple[Text, ...] = ()
    stop_order: tuple[Text, ...] = ()
    aux: tuple[PlanProcess, ...]
    command: PlanProcess
    endpoint: Text
    model: Text
    launched: bool | UnsetType = UNSET
    owned: bool | UnsetType = UNSET
    url: Text | None | UnsetType = UNSET
    readiness: Text | UnsetType = UNSET
    health: Text | UnsetType = UNSET
    cwd: Text | None | UnsetType = UNSET
    environment: DeclaredEnvironment | UnsetType = UNSET  # when the recipe declares one
    # a url backend's request headers: header name -> environment variable (names only, never a value)
    headers_from_env: dict[Text, Text] | UnsetType = UNSET

    def __post_init__(self) -> None:
        start = tuple(a.name for a in self.aux) + ("command",)
        if not self.start_order:
            msgspec.structs.force_setattr(self, "start_order", start)
            msgspec.structs.force_setattr(self, "stop_order", start[::-1])
        derived = {"start_order": start, "stop_order": start[::-1], "launched": self.server_url is None,
                   "owned": self.server_url is None}
        for key, value in derived.items():
            if getattr(self, key) not in (value, UNSET):
                raise ValueError(f"backend {self.name}: {key} {getattr(self, key)!r} does not follow from its "
                                 f"url and aux ({value!r})")

    @property
    def server_url(self) -> str | None:
        """The running server a `url` backend reaches; None for a backend the study launches."""
        return self.url if isinstance(self.url, str) else None

    @property
    def is_launched(self) -> bool:
        return self.server_url is None

    @property
    def readiness_kind(self) -> str:
        return self.readiness if isinstance(self.readiness, str) else "status-ready"

    @property
    def header_variables(self) -> dict[str, str]:
        """A url backend's {header: environment variable} (runtime/external.py reads the values)."""
        return {} if isinstance(self.headers_from_env, UnsetType) else dict(self.headers_from_env)

    @property
    def health_path(self) -> str:
        return "/health" if isinstance(self.health, UnsetType) else self.health

    @property
    def workdir(self) -> str | None:
        return self.cwd if isinstance(self.cwd, str) else None

    def fixed_ports(self) -> list[tuple[str, int]]:
        """(process name, port) of each of its processes the plan gives a fixed port, the command first."""
        named = [(self.name, self.command.fixed_port), *((f"{self.name}.{a.name}", a.fixed_port) for a in self.aux)]
        return [(name, port) for name, port in named if port is not None]


class PlanLoad(Record, frozen=True, kw_only=True):
    """How one load level loads the backend (evidence.recipe.LoadLevel)."""

    id: Text
    kind: Literal["closed", "open"]
    concurrency: Count | UnsetType = UNSET
    rate_per_s: Number | UnsetType = UNSET
    arrivals: Literal["poisson", "fixed"] | UnsetType = UNSET
    seed: Count | UnsetType = UNSET

    def level(self) -> LoadLevel:
        return LoadLevel(**{k: v for k, v in msgspec.structs.asdict(self).items() if v is not UNSET})


class PlanStep(Record, frozen=True, kw_only=True):
    """One step of a backend's sequence: first inference, warm-up, or a feasibility or measured pass."""

    phase: Literal["first", "warmup", "feasibility", "measured"]
    detail: Text | UnsetType = UNSET  # the first inference's sentence
    longest_first: bool | UnsetType = UNSET  # the warm-up step's settings
    longest_of: Text | None | UnsetType = UNSET
    requests: Count | UnsetType = UNSET
    workload: Text | UnsetType = UNSET  # feasibility and measured passes
    index: Count | UnsetType = msgspec.field(default=UNSET, name="pass")  # their 1-based pass number
    level: Text | UnsetType = UNSET  # a load level's id (workloads with a `load`), e.g. closed-c4
    load: PlanLoad | UnsetType = UNSET  # how that level loads the backend
    latency_bound_ms: Number | UnsetType = UNSET  # the workload's goodput bound, when declared

    def __post_init__(self) -> None:
        timed = self.phase in ("feasibility", "measured")
        if timed != (isinstance(self.workload, str) and isinstance(self.index, int)) or (self.index == 0):
            raise ValueError(f"a {self.phase} step names a workload and a pass >= 1 exactly when it is timed")
        if isinstance(self.level, str) != isinstance(self.load, PlanLoad):
            raise ValueError("a load step names both its level and its load")

    @classmethod
    def warm_up(cls, warmup: Warmup, workload: str | None = None) -> PlanStep:
        return cls(phase="warmup", longest_first=warmup.longest_first, longest_of=warmup.longest_of,
                   requests=warmup.requests, workload=UNSET if workload is None else workload)

    @property
    def warmup(self) -> Warmup | None:
        if self.phase != "warmup":
            return None
        return Warmup(longest_first=self.longest_first is not False, requests=self.requests or 0,
                      longest_of=self.longest_of if isinstance(self.longest_of, str) else None)

    @property
    def pass_index(self) -> int:
        return self.index if isinstance(self.index, int) else 1

    @property
    def workload_name(self) -> str | None:
        return self.workload if isinstance(self.workload, str) else None

    @property
    def load_level(self) -> LoadLevel | None:
        return self.load.level() if isinstance(self.load, PlanLoad) else None

    def label(self) -> str:
        return (self.phase + (f" {self.workload}" if isinstance(self.workload, str) else "")
                + (f"#{self.index}" if isinstance(self.index, int) else "")
                + (f" @{self.level}" if isinstance(self.level, str) else ""))


class PlanSequence(Record, frozen=True, kw_only=True):
    """One backend's steps in the protocol's order: the first inference (if any) first, a workload's warm-up
    (if any) before its timed passes, and each workload's feasibility and measured passes numbered 1, 2, …
    in turn. Counts, levels and which warm-ups run are the plan's to choose; that order is not."""

    backend: Text
    server: Text = "one server reused for every pass"
    steps: tuple[PlanStep, ...]

    def __post_init__(self) -> None:
        done: dict[tuple[str, str], int] = {}
        timed: set[str] = set()  # workloads with a timed pass so far
        for position, step in enumerate(self.steps):
            if step.phase == "first" and position:
                raise ValueError(f"backend {self.backend}: the first inference is step {position + 1}; "
                                 "it can only be the first step")
            warmed = timed if step.workload_name is None else timed & {step.workload_name}
            if step.phase == "warmup" and warmed:
                raise ValueError(f"backend {self.backend}: a warm-up follows timed passes of "
                                 f"{', '.join(sorted(warmed))}; a warm-up comes before the passes it warms up")
            if step.workload_name is not None and step.phase in ("feasibility", "measured"):
                timed.add(step.workload_name)
            if step.workload_name is not None and step.phase in ("feasibility", "measured"):
                key = (step.workload_name, step.phase)
                if step.pass_index != done.get(key, 0) + 1:
                    raise ValueError(f"backend {self.backend}: {step.label()} follows {step.phase} pass "
                                     f"{done.get(key, 0)} of {step.workload_name}; passes are numbered 1, 2, … in order")
                done[key] = step.pass_index


class PlanHash(Record, frozen=True, kw_only=True):
    """A file whose sha256 the study verifies before measuring ("unpinned" until the lock pins it)."""

    path: Text
    sha256: Text
    role: Text
    published_sha256: Text | None

    @property
    def pinned(self) -> bool:
        return self.sha256 != "unpinned"


class PinCheck(Record, frozen=True, kw_only=True):
    field: Text  # dotted path in the recipe, e.g. inputs.files.0.sha256
    kind: Text  # sha256 | commit | hf_revision | gpu_uuid
    value: Text
    status: Text  # ok | unpinned


class PlanAction(Record, frozen=True, kw_only=True):
    """A preparation step as planned (study.preparation.PrepareAction's fields)."""

    kind: Text
    name: Text
    detail: Text
    argv: tuple[Text, ...] = ()
    env: dict[str, Text] = msgspec.field(default_factory=dict)
    cwd: Text | None = None
    target: Text | None = None
    done: bool = False

    @property
    def shows_command(self) -> bool:
        return bool(self.argv) and self.kind == "command"


class PlannedTrace(Record, frozen=True, kw_only=True):
    """One planned trace (study.traces.TraceItem)."""

    backend: Text
    tokens: Count
    repeat: Count
    position: Count
    output: Text
    wrap: Text | None


class PlanTraces(Record, frozen=True, kw_only=True):
    enabled: bool
    items: tuple[PlannedTrace, ...] | UnsetType = UNSET  # when enabled
    note: Text | UnsetType = UNSET  # why items is empty although traces are enabled


class PlanRecipeRef(Record, frozen=True, kw_only=True):
    path: Text
    sha256: Text


class PlanGpuRef(Record, frozen=True, kw_only=True):
    index: Count | None = None
    uuid: Text | None = None


class PlanGpuOverride(Record, frozen=True, kw_only=True):
    """The GPU override a study was given (host/override.GpuOverride.declared), a run-only field."""

    recipe: PlanGpuRef | None
    run_time: PlanGpuRef
    source: Text


class _PlanFile(Record, frozen=True, kw_only=True):
    """plan.json's keys; the recipe's models are validated by their own schema (`Plan.from_json`)."""

    format_version: Literal[1]
    study: dict[str, Quoted]
    recipe: PlanRecipeRef
    inputs_root: Text
    runtime: Text | None
    images: tuple[Text, ...]
    needs_preparation: bool
    unpinned: tuple[Text, ...]
    preparation: dict[str, Quoted] | None
    hashes: tuple[PlanHash, ...]
    pins: dict[str, Quoted]
    controls: dict[str, Quoted]
    protocol: dict[str, Quoted]
    backends: tuple[PlanBackend, ...]
    passes: tuple[PlanSequence, ...]
    traces: PlanTraces
    gates: list[dict[str, Quoted]]
    notes: tuple[Text, ...]
    case_ids: dict[str, list[Text]] | UnsetType = UNSET
    gpu_override: PlanGpuOverride | UnsetType = UNSET


class _Preparation(Record, frozen=True, kw_only=True):
    lock: Text
    downloads: list[dict[str, Quoted]]
    sources: list[dict[str, Quoted]]
    provided: tuple[Text, ...]
    actions: tuple[PlanAction, ...]


def _dump(model: BaseModel) -> dict[str, object]:
    dumped: dict[str, object] = model.model_dump(mode="json", exclude_unset=True)
    return dumped


def every_field_set(model: M) -> M:
    """`model` with every field (nested ones too) marked set, so that plan.json writes each
    (what `resolve_plan` hands a `Plan`: plan.json then holds every field of the recipe's models)."""
    return type(model).model_validate(model.model_dump())


@dataclass(frozen=True)
class PlanPreparation:
    lock: str
    downloads: tuple[Download, ...]
    sources: tuple[Source, ...]
    provided: tuple[str, ...]
    actions: tuple[PlanAction, ...]

    def to_json(self) -> dict[str, object]:
        return {"lock": self.lock, "downloads": [_dump(d) for d in self.downloads],
                "sources": [_dump(s) for s in self.sources], "provided": list(self.provided),
                "actions": [a.to_json() for a in self.actions]}


_GATES: TypeAdapter[list[Gate]] = TypeAdapter(list[Gate])


@dataclass(frozen=True)
class Plan:
    """The fully resolved plan of a recipe (`study.planner.resolve_plan`); `to_json()` is plan.json's."""

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
    case_ids: dict[str, list[str]] | None = None  # run-only: each workload's request ids in pass order
    gpu_override: PlanGpuOverride | None = None  # run-only: the GPU the study was told to use

    @property
    def needs_preparation(self) -> bool:
        return bool(self.unpinned)

    def backend(self, name: str) -> PlanBackend:
        return next(b for b in self.backends if b.name == name)

    def pass_budget(self, phase: Literal["feasibility", "measured"] = "measured") -> dict[tuple[str, str], int]:
        """Per (backend, workload), how many passes of `phase` the plan runs (all its levels' together)."""
        budget: dict[tuple[str, str], int] = {}
        for sequence in self.passes:
            for step in sequence.steps:
                if step.phase == phase and step.workload_name is not None:
                    key = (sequence.backend, step.workload_name)
                    budget[key] = budget.get(key, 0) + 1
        return budget

    def mismatch(self, backends: list[str], workloads: list[str]) -> str | None:
        """Why this plan cannot run a recipe of `backends` (in order) and `workloads`; None when it can.

        Which backends run, and which workloads exist (their requests), are the recipe's to say."""
        if [b.name for b in self.backends] != backends:
            return (f"its backends are not the recipe's ({', '.join(backends)}, in that order); edit the recipe to "
                    "change which backends run.")
        named = {s.workload_name for q in self.passes for s in q.steps if s.workload_name is not None}
        unknown = sorted(named - set(workloads))
        if unknown:
            return f"steps name workloads the recipe does not declare: {', '.join(unknown)}."
        measured = self.pass_budget()
        unmeasured = [f"{b} measures no pass of {w}" for b in backends for w in workloads if (b, w) not in measured]
        if unmeasured:
            return (f"{'; '.join(unmeasured)}: every backend measures every workload the recipe declares "
                    "(a recipe workload's measured passes are 1 or more).")
        return None

    def steps_of(self, backend: str) -> tuple[PlanStep, ...]:
        return next(s.steps for s in self.passes if s.backend == backend)

    def with_run_facts(self, case_ids: dict[str, list[str]], gpu_override: PlanGpuOverride | None) -> Plan:
        """plan.json of a run: the planned fields unchanged, then the run-only ones."""
        return replace(self, case_ids=case_ids, gpu_override=gpu_override)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "format_version": self.format_version,
            "study": _dump(self.study),
            "recipe": {"path": self.recipe_path, "sha256": self.recipe_sha256},
            "inputs_root": self.inputs_root,
            "runtime": self.runtime,
            "images": list(self.images),
            "needs_preparation": self.needs_preparation,
            "unpinned": list(self.unpinned),
            "preparation": self.preparation.to_json() if self.preparation is not None else None,
            "hashes": [h.to_json() for h in self.hashes],
            "pins": {"checked": [c.to_json() for c in self.pins_checked], **_dump(self.pins)},
            "controls": _dump(self.controls),
            "protocol": _dump(self.protocol),
            "backends": [b.to_json() for b in self.backends],
            "passes": [p.to_json() for p in self.passes],
            "traces": self.traces.to_json(),
            "gates": [_dump(g) for g in self.gates],
            "notes": list(self.notes),
        }
        if self.case_ids is not None:
            out["case_ids"] = {name: list(ids) for name, ids in self.case_ids.items()}
        if self.gpu_override is not None:
            out["gpu_override"] = self.gpu_override.to_json()
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "plan.json") -> Plan:
        """A plan read back; EvidenceError (one line naming `where` and the field) for any other shape."""
        file = decode(data, _PlanFile, where)
        if bool(file.unpinned) != file.needs_preparation:
            raise EvidenceError(f"{where}: needs_preparation does not follow from unpinned.")
        if [s.backend for s in file.passes] != [b.name for b in file.backends]:
            raise EvidenceError(f"{where}: passes name other backends than backends, or in another order.")
        try:  # each recipe model keeps exactly the keys its file held (an older file lacks later fields)
            return cls._of(file)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(p) for p in first["loc"])
            raise EvidenceError(f"{where}: {first['msg']} at `{path}`.") from None

    @classmethod
    def _of(cls, file: _PlanFile) -> Plan:
        pins: dict[str, Quoted] = dict(file.pins)
        checked = decode(pins.pop("checked", []), tuple[PinCheck, ...], "plan.json pins.checked")
        return cls(study=Study.model_validate(file.study), recipe_path=file.recipe.path,
                   recipe_sha256=file.recipe.sha256, inputs_root=file.inputs_root, runtime=file.runtime,
                   images=file.images, unpinned=file.unpinned, preparation=_preparation(file.preparation),
                   hashes=file.hashes, pins_checked=checked, pins=Pins.model_validate(pins),
                   controls=Controls.model_validate(file.controls), protocol=Protocol.model_validate(file.protocol),
                   backends=file.backends, passes=file.passes, traces=file.traces,
                   gates=tuple(_GATES.validate_python(file.gates)), notes=file.notes,
                   case_ids=file.case_ids if isinstance(file.case_ids, dict) else None,
                   gpu_override=file.gpu_override if isinstance(file.gpu_override, PlanGpuOverride) else None)


def _preparation(data: dict[str, Quoted] | None) -> PlanPreparation | None:
    if data is None:
        return None
    part = decode(data, _Preparation, "plan.json preparation")
    return PlanPreparation(lock=part.lock, downloads=tuple(Download.model_validate(d) for d in part.downloads),
                           sources=tuple(Source.model_validate(s) for s in part.sources),
                           provided=part.provided, actions=part.actions)


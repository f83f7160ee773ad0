"""Recipe schema, loading and validation.

A recipe declares a study before it runs: what to run (backends), on what (inputs and
workloads), how (protocol), where (controls) and what counts as success (gates).
Validation errors name the file, the line and the field path.

Format history:
    1  (2026-11) first version. Later additive fields (all optional, old recipes unchanged):
       `sha256: unpinned` for inputs/artifacts of recipes with a `preparation` section (their
       hashes come from the inputs lock written by `invoke prepare`), `InputFile.published_sha256`,
       `preparation`, `pins`, `traces`, `Backend.aux` (auxiliary processes of one backend),
       `environment` (study level) and `Backend.environment` (what each backend must report
       once ready, checked before measuring), `controls.idle_window_s`, gate `gpu_not_throttled`.
       `Backend.url` (a running server instead of a command), `Backend.readiness`, `Backend.cwd`,
       `Backend.headers_from_env` (a url backend's request headers, valued from the environment).
       `Workload.load` (issue 29): a closed concurrency ladder and/or open-loop arrival rates,
       each level run with the protocol's feasibility and measured passes (absent: one closed
       level at concurrency 1, today's protocol, evidence unchanged).
       `Backend.kernel_caches` (issue 39): fresh or pinned Triton/Inductor caches of a launched backend.
       `reproduction` (issue 38): a rerun's equivalence margins and comparability fields.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, urlsplit

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from ..errors import RecipeError
from ..limits import MAX_PASSES, MAX_REPEAT, MAX_TIMEOUT_S
from ..schema import StrictModel
from .reproduction import Reproduction
from .trace_recipe import Families, GraphReplayGate, KernelTimeReductionGate

__all__ = [
    "COMMIT_RE",
    "READINESS_KINDS",
    "RECIPE_FORMAT_VERSION",
    "SHA256_RE",
    "UNPINNED",
    "AuxProcess",
    "Backend",
    "Controls",
    "Download",
    "EnvironmentSpec",
    "Gate",
    "InputFile",
    "Inputs",
    "KernelCachePin",
    "KernelCaches",
    "Load",
    "LoadLevel",
    "NoAliasLoader",
    "OpenLoad",
    "Pins",
    "Preparation",
    "PrepareStep",
    "Protocol",
    "Recipe",
    "RequestSelection",
    "Source",
    "Study",
    "Traces",
    "Workload",
    "load_recipe",
    "lock_path",
    "parse_duration",
    "parse_recipe",
    "parse_server_url",
    "read_yaml",
    "safe_yaml",
]

RECIPE_FORMAT_VERSION = 1
SHA256_RE = r"^[0-9a-f]{64}$"
NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"
HEADER_NAME_RE = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"  # an HTTP field name (RFC 9110 token)
ENV_VAR_RE = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
COMMIT_RE = r"^[0-9a-f]{40}$"
HF_REPO_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"
# A hash not yet known: allowed only in recipes with a `preparation` section, filled from the
# inputs lock by `invoke prepare`; `invoke study` refuses to run while any remains.
UNPINNED = "unpinned"
PIN_RE = r"^([0-9a-f]{64}|unpinned)$"


# Bounded numbers: a count or a timeout outside these is a typo, and would exhaust memory or never end.
Passes = Annotated[int, Field(ge=0, le=MAX_PASSES)]
Seconds = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses YAML aliases (*name): an alias bomb cannot expand, and no recipe needs one."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed in this file",
                                              event.start_mark)
        return super().compose_node(parent, index)


def safe_yaml(text: str) -> Any:
    """yaml.safe_load without aliases (raises yaml.YAMLError on one)."""
    return yaml.load(text, Loader=NoAliasLoader)


class Study(StrictModel):
    id: Annotated[str, Field(pattern=NAME_RE)]
    date: date
    purpose: str
    source: str | None = None  # the published report this recipe reproduces, if any


def _relative_path(value: str) -> str:
    if value.startswith("/") or ".." in Path(value).parts:
        raise ValueError("input paths are relative to inputs.root and may not leave it")
    return value


class InputFile(StrictModel):
    path: str  # relative to inputs.root, POSIX separators
    sha256: Annotated[str, Field(pattern=PIN_RE)]  # or "unpinned" (see UNPINNED)
    role: str = "input"
    # A hash the published study reports for this input whose serialization is unverified:
    # prepare compares and reports it, but does not enforce it.
    published_sha256: Annotated[str, Field(pattern=SHA256_RE)] | None = None

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return _relative_path(value)


class Inputs(StrictModel):
    root: str  # relative to the recipe file, or absolute
    scan: list[str] = []  # directories under root whose undeclared files are reported
    files: list[InputFile]

    @field_validator("scan")
    @classmethod
    def _scan_inside(cls, value: list[str]) -> list[str]:
        return [_relative_path(v) for v in value]

    @model_validator(mode="after")
    def _unique(self) -> Inputs:
        seen: set[str] = set()
        for f in self.files:
            if f.path in seen:
                raise ValueError(f"input {f.path!r} is declared twice")
            seen.add(f.path)
        return self


class Selection(StrictModel):
    types: list[Literal["noul", "choice", "score"]] = ["noul"]
    ids: list[str] | None = None  # exactly these case ids, in this order
    first: Annotated[int, Field(ge=1)] | None = None  # the first N after filtering


MAX_CONCURRENCY = 256  # connections of one closed-loop level
MAX_RATE_PER_S = 100_000.0  # arrivals per second of one open-loop level


@dataclass(frozen=True)
class LoadLevel:
    """One load level of a workload: `closed` (N workers, each its own connection, sending the
    next request as soon as its previous one is answered) or `open` (requests sent at precomputed
    arrival times, `rate_per_s` on average, whatever the server does)."""

    id: str  # closed-c{N} or open-r{rate:g}
    kind: Literal["closed", "open"]
    concurrency: int | None = None  # closed
    rate_per_s: float | None = None  # open
    arrivals: Literal["poisson", "fixed"] | None = None  # open
    seed: int | None = None  # open, poisson: the arrival gaps' seed

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class OpenLoad(StrictModel):
    rates_per_s: Annotated[list[Annotated[float, Field(gt=0, le=MAX_RATE_PER_S, allow_inf_nan=False)]],
                           Field(min_length=1)]
    arrivals: Literal["poisson", "fixed"] = "poisson"  # poisson: seeded exponential gaps; fixed: 1/rate
    seed: Annotated[int, Field(ge=0)] = 0


class Load(StrictModel):
    """A workload's load levels: the closed ladder ascending, then the open rates ascending."""

    closed: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = []
    open: OpenLoad | None = None
    latency_bound_ms: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S * 1e3, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _levels_distinct(self) -> Load:
        ids = [level.id for level in self.levels()]
        if not ids:
            raise ValueError("load declares no level: give `closed` concurrencies and/or `open.rates_per_s`")
        if len(set(ids)) != len(ids):
            raise ValueError(f"load levels repeat: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}")
        return self

    def levels(self) -> list[LoadLevel]:
        closed = [LoadLevel(f"closed-c{n}", "closed", concurrency=n) for n in sorted(self.closed)]
        spec = self.open
        rates = sorted(spec.rates_per_s) if spec is not None else []
        return closed + [LoadLevel(f"open-r{rate:g}", "open", rate_per_s=rate, arrivals=spec.arrivals,
                                   seed=spec.seed) for rate in rates if spec is not None]


class Workload(StrictModel):
    name: Annotated[str, Field(pattern=NAME_RE)]
    requests: str  # path under inputs.root; must be a declared input
    selection: Selection = Selection()
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] = 1  # each selected request repeated (fixed-length workloads)
    order: Literal["file"] = "file"
    feasibility_passes: Passes | None = None  # None: protocol's value
    measured_passes: Annotated[int, Field(ge=1, le=MAX_PASSES)] | None = None
    load: Load | None = None  # None: one closed level at concurrency 1 (rows carry no level)

    def levels(self) -> list[LoadLevel] | None:
        """The declared load levels in run order; None when the workload declares no load."""
        return None if self.load is None else self.load.levels()


class Artifact(StrictModel):
    path: str
    sha256: Annotated[str, Field(pattern=PIN_RE)]  # or "unpinned" (see UNPINNED)


class AuxProcess(StrictModel):
    """A helper process of one backend (a worker behind a frontend), started before `command`.

    The runner starts aux processes in list order, each on its own port (`port`, or a free one),
    waits for its `health` path to answer ready, then starts the backend's `command`, which
    may refer to `{port.<name>}`. Stop order is the reverse: command first, then aux reversed.
    """

    name: Annotated[str, Field(pattern=NAME_RE)]
    command: list[str]  # placeholders as Backend.command, plus {port.<name>} of earlier aux
    env: dict[str, str] = {}
    health: str | None = "/health"  # None: no readiness check (started, then assumed up)
    port: Annotated[int, Field(ge=1, le=65535)] | None = None  # fixed port if upstream needs one
    ready_timeout_s: Seconds | None = None  # None: protocol.ready_timeout_s


# A package requirement: an exact version ("2.13.0") or a PEP 440 specifier (">=5.10,<6"),
# or "absent" (the package must not be importable by the backend, e.g. FLA for a reference run).
PackageRequirement = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\n\r]+$")]


class TritonCache(StrictModel):
    """A Triton cache directory (FLA's autotuned choices) pinned as an input: `dir` under inputs.root,
    `sha256` its tree digest (`invoke environment --tree-digest DIR` prints it)."""

    dir: str
    sha256: Annotated[str, Field(pattern=SHA256_RE)]

    @field_validator("dir")
    @classmethod
    def _inside_root(cls, value: str) -> str:
        return _relative_path(value)


KernelCacheKind = Literal["triton", "inductor"]


class KernelCachePin(StrictModel):
    """An archive made by `invoke kernel-cache` (under inputs.root) and the sha256 of its bytes."""

    archive: str
    sha256: Annotated[str, Field(pattern=SHA256_RE)]

    @field_validator("archive")
    @classmethod
    def _inside_root(cls, value: str) -> str:
        return _relative_path(value)


class KernelCaches(StrictModel):
    """The kernel caches the study gives one launched backend (issue 39, openjev_repro/study/kernel_caches.py):
    each kind a fresh directory beside the run (triton: TRITON_CACHE_DIR, FLA's autotune results too;
    inductor: TORCHINDUCTOR_CACHE_DIR), filled from the `pinned` archives, which must stay unchanged."""

    kinds: Annotated[list[KernelCacheKind], Field(min_length=1)]
    pinned: list[KernelCachePin] = []

    @model_validator(mode="after")
    def _distinct(self) -> KernelCaches:
        _unique(list(self.kinds), "kernel cache kind")
        _unique([p.archive for p in self.pinned], "kernel cache archive")
        return self

    def check_launch(self, backend: str, runtime: str, env: dict[str, str]) -> None:
        """The study points a local backend at the caches: `env` may not name them, docker cannot write them."""
        named = sorted({"triton": "TRITON_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR"}[k] for k in self.kinds)
        if set(named) & set(env):
            raise ValueError(f"backend {backend!r}: kernel_caches sets {', '.join(named)}; `env` cannot set it too")
        if runtime != "local":
            raise ValueError(f"backend {backend!r}: kernel_caches need the local runtime (the study's cache folders "
                             f"are not mounted into a {runtime} container)")


class EnvironmentSpec(StrictModel):
    """What a backend must report once ready (its /health, else environment.json): checked before
    the first inference; each difference stops the study unless --allow-environment-drift."""

    packages: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")], PackageRequirement] = {}
    # /health `kernels` keys: linear_attention (reference | fla), conv (reference | causal_conv1d), norm.
    implementations: dict[Annotated[str, Field(pattern=r"^[a-z_]+$")], Annotated[str, Field(max_length=200)]] = {}
    dtype: str | None = None
    weights_fingerprint: Annotated[str, Field(max_length=200)] | None = None
    triton_cache: TritonCache | None = None

    def merged(self, override: EnvironmentSpec | None) -> EnvironmentSpec:
        """This (the study-level default) with a backend's own declarations on top."""
        if override is None:
            return self
        return EnvironmentSpec(
            packages={**self.packages, **override.packages},
            implementations={**self.implementations, **override.implementations},
            dtype=override.dtype or self.dtype,
            weights_fingerprint=override.weights_fingerprint or self.weights_fingerprint,
            triton_cache=override.triton_cache or self.triton_cache)


# How the runner knows a backend is ready (each within protocol.ready_timeout_s):
#   status-ready     GET `health` answers 200 with JSON {"status": "ready", ...} (our /health contract)
#   any-2xx          GET `health` answers any 2xx status, whatever its body
#   first-inference  the first-inference request (POST `endpoint`) answers 2xx: for servers without a health route
Readiness = Literal["status-ready", "any-2xx", "first-inference"]
READINESS_KINDS: tuple[str, ...] = ("status-ready", "any-2xx", "first-inference")


def _path(value: str, field: str) -> str:
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ValueError(f"{field} {value!r} is a path: it starts with '/' and holds no spaces or line breaks")
    return value


def parse_server_url(value: str) -> tuple[str, int]:
    """(host, port) of a backend `url` such as http://127.0.0.1:8787; ValueError says what is wrong."""
    parts = urlsplit(value)
    if parts.scheme != "http":
        raise ValueError(f"url {value!r}: only http:// is supported (the timed client speaks plain HTTP/1.1)")
    if not parts.hostname or parts.username or parts.password or parts.query or parts.fragment \
            or parts.path not in ("", "/"):
        raise ValueError(f"url {value!r}: give only http://HOST:PORT (no path, query or user; "
                         "the path goes into `endpoint` and `health`)")
    return parts.hostname, _server_port(parts, value)


def _server_port(parts: SplitResult, value: str) -> int:
    """The port of a server's url: 80 when none is given; port 0 ("any free port" when listening) is
    no server's port, and is refused rather than read as 80."""
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"url {value!r}: the port is not a number from 1 to 65535") from None
    if port == 0:
        raise ValueError(f"url {value!r}: port 0 is no server's port; give the port it listens on, 1 to 65535")
    return 80 if port is None else port


class Backend(StrictModel):
    """One configuration under test: a command the study launches, or (`url`) a server already running.

    A `url` backend is reached, never launched, stopped or owned by the study (recorded as such);
    launch-only fields (`runtime` docker, `image`, `env`, `port`, `cwd`, `aux`) do not apply to it.
    """

    name: Annotated[str, Field(pattern=NAME_RE)]
    runtime: Literal["local", "docker"] = "local"
    # argv; placeholders: {python} {host} {port} {inputs} {run} {backend} {repro}. Empty when `url` is given.
    command: list[str] = []
    url: str | None = None  # a running server, http://HOST:PORT, instead of a command
    image: str | None = None  # docker image reference for runtime docker
    env: dict[str, str] = {}
    cwd: str | None = None  # working directory of the command (placeholders allowed); None: the study's own
    port: Annotated[int, Field(ge=1, le=65535)] | None = None  # fixed port; None: a free one is chosen
    endpoint: str = "/v1/systemone"  # the path requests are POSTed to
    health: str = "/health"  # the path GET-polled by readiness status-ready and any-2xx
    readiness: Readiness = "status-ready"
    model: str = "open-jev"  # the request body's "model"; a foreign server may accept other names only
    artifacts: list[Artifact] = []
    description: str = ""
    aux: list[AuxProcess] = []  # started before command, stopped after it
    environment: EnvironmentSpec | None = None  # on top of the recipe's `environment`
    # url backends: HTTP header name -> the environment variable holding its value (read at run time by
    # runtime/external.py; the recipe, the plan and the evidence hold the variable's name only)
    headers_from_env: dict[Annotated[str, Field(pattern=HEADER_NAME_RE)], Annotated[str, Field(pattern=ENV_VAR_RE)]] = {}
    kernel_caches: KernelCaches | None = None  # fresh or pinned kernel caches (issue 39)

    @field_validator("endpoint", "health")
    @classmethod
    def _paths(cls, value: str, info) -> str:
        return _path(value, info.field_name)

    @model_validator(mode="after")
    def _aux_names(self) -> Backend:
        _unique([a.name for a in self.aux], "aux process")
        if self.url is None and not self.command:
            raise ValueError(f"backend {self.name!r} needs a `command` to launch, or the `url` of a running server")
        if self.url is None and self.headers_from_env:
            raise ValueError(f"backend {self.name!r}: headers_from_env is for a `url` backend (a launched command "
                             "takes its settings from its own flags and `env`)")
        if self.url is not None:
            self._check_url_backend()
        if self.kernel_caches is not None:
            self.kernel_caches.check_launch(self.name, self.runtime, self.env)
        return self

    def _check_url_backend(self) -> None:
        assert self.url is not None
        parse_server_url(self.url)
        if self.command:
            raise ValueError(f"backend {self.name!r} has both `command` and `url`; give one "
                             "(url: a server already running, which the study does not launch)")
        given = {"image": self.image is not None, "cwd": self.cwd is not None, "port": self.port is not None,
                 "env": bool(self.env), "aux": bool(self.aux), "kernel_caches": self.kernel_caches is not None,
                 "runtime": self.runtime != "local",
                 "environment.triton_cache": bool(self.environment and self.environment.triton_cache)}
        launch_only = [name for name, set_ in given.items() if set_]
        if launch_only:
            raise ValueError(f"backend {self.name!r} is reached by `url`, so {', '.join(launch_only)} "
                             "(which apply to a launched command) cannot be set")

    @property
    def launched(self) -> bool:
        """True when the study starts this backend; False for a `url` backend (running already, not ours)."""
        return self.url is None


class Warmup(StrictModel):
    longest_first: bool = True  # the longest selected request first, to size scratch buffers
    requests: Annotated[int, Field(ge=0, le=MAX_REPEAT)] = 2  # then the first N requests of the workload
    # The workload whose longest request goes first, so one scratch size serves every later
    # workload (None: the workload being run).
    longest_of: str | None = None


class Protocol(StrictModel):
    first_inference: bool = True
    warmup: Warmup = Warmup()
    feasibility_passes: Passes = 1
    measured_passes: Annotated[int, Field(ge=1, le=MAX_PASSES)] = 2
    concurrency: Literal[1] = 1
    request_timeout_s: Seconds = 120.0
    ready_timeout_s: Seconds = 600.0
    stop_grace_s: Seconds = 10.0
    # The largest answer the timed client takes (header and body as received); a larger one fails its
    # request (docs/security.md). A /v1/systemone answer is a few KB.
    max_response_bytes: Annotated[int, Field(ge=1 << 10, le=1 << 31)] = 64 << 20


class Gpu(StrictModel):
    index: Annotated[int, Field(ge=0)]
    uuid: Annotated[str, Field(pattern=r"^GPU-[0-9a-fA-F-]{36}$")]


class ReservationSettings(StrictModel):
    wait: str = "0s"
    timeout: str = "45m"
    note: str = ""

    @field_validator("wait", "timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value


class Controls(StrictModel):
    gpu: Gpu | None = None
    numa_node: Annotated[int, Field(ge=0)] | None = None
    cpus: Annotated[str, Field(pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$")] | None = None
    reservation: ReservationSettings | None = None
    memory_sample_period_ms: Annotated[int, Field(ge=10)] = 100
    allow_busy: bool = False
    # Quiet window after each backend's readiness, before its first inference: idle power for
    # "energy above idle" (only with a GPU in controls).
    idle_window_s: Annotated[float, Field(ge=0, le=600, allow_inf_nan=False)] = 3.0


class _Gate(StrictModel):
    name: Annotated[str, Field(pattern=NAME_RE)]
    description: str = ""


class MeanReductionGate(_Gate):
    """candidate's overall mean is at least `min_percent` below baseline's."""

    kind: Literal["mean_reduction"]
    workload: str
    baseline: str
    candidate: str
    min_percent: Finite
    disjoint_ranges: bool = False  # the two sets of pass means do not overlap
    every_pass: bool = False  # every candidate pass mean below every baseline pass mean


class MaxProbabilityDeltaGate(_Gate):
    kind: Literal["max_probability_delta"]
    workload: str
    a: str
    b: str
    max: Finite


class DecisionsUnchangedGate(_Gate):
    """Every paired decision of a and b is equal; with `min_margin`, only where a's margin |p - 0.5| exceeds it."""

    kind: Literal["decisions_unchanged"]
    workload: str
    a: str
    b: str
    min_margin: Annotated[float, Field(ge=0.0, le=0.5, allow_inf_nan=False)] | None = None


class ProbabilitiesStableGate(_Gate):
    """A backend's probabilities are bit-identical across its feasibility and measured passes."""

    kind: Literal["probabilities_stable"]
    workload: str
    backend: str


class GpuNotThrottledGate(_Gate):
    """No measured pass saw a thermal or hardware slowdown clock-event reason (gpu.jsonl)."""

    kind: Literal["gpu_not_throttled"]
    backend: str | None = None  # None: every backend


class ExternalGate(_Gate):
    """Judged from evidence the runner does not produce (traces, GPU test suites): recorded, not evaluated."""

    kind: Literal["external"]
    evidence: str


Gate = Annotated[
    MeanReductionGate | MaxProbabilityDeltaGate | DecisionsUnchangedGate | ProbabilitiesStableGate
    | GpuNotThrottledGate | ExternalGate | KernelTimeReductionGate | GraphReplayGate,
    Field(discriminator="kind"),
]


class Download(StrictModel):
    """A Hugging Face repository snapshot at a pinned revision, fetched by `invoke prepare`."""

    name: Annotated[str, Field(pattern=NAME_RE)]
    repo: Annotated[str, Field(pattern=HF_REPO_RE)]
    revision: Annotated[str, Field(pattern=COMMIT_RE)]
    dest: str  # under inputs.root
    include: list[str] = []  # allow patterns; empty: every file
    repo_type: Literal["model", "dataset"] = "model"

    @field_validator("dest")
    @classmethod
    def _inside_root(cls, value: str) -> str:
        return _relative_path(value)


class Source(StrictModel):
    """A git checkout at a pinned commit (upstream code we run, never copy)."""

    name: Annotated[str, Field(pattern=NAME_RE)]
    url: str
    commit: Annotated[str, Field(pattern=COMMIT_RE)]
    dest: str  # under inputs.root

    @field_validator("dest")
    @classmethod
    def _inside_root(cls, value: str) -> str:
        return _relative_path(value)


class PrepareStep(StrictModel):
    """A command prepare runs once (an upstream script at its pinned commit), unless `produces` exists.

    Placeholders: {python} {inputs} {source.<name>} {download.<name>}.
    """

    name: Annotated[str, Field(pattern=NAME_RE)]
    command: list[str]
    env: dict[str, str] = {}
    cwd: str | None = None  # placeholders allowed; default inputs.root
    produces: str  # a path under inputs.root; the step is done when it exists
    description: str = ""

    @field_validator("produces")
    @classmethod
    def _inside_root(cls, value: str) -> str:
        return _relative_path(value)


JEVBENCH_PUBLIC_FILES = ["datasets/public/original.jsonl", "datasets/public/easy.jsonl", "datasets/public/hard.jsonl"]


class RequestSelection(StrictModel):
    """Our selection: tasks of `types` from a JevBench checkout's `files`, in file order, lines kept byte-exact."""

    source: str  # a Source name
    files: list[str] = JEVBENCH_PUBLIC_FILES
    types: list[Literal["noul", "choice", "score"]] = ["noul"]
    dest: str  # a declared input
    expect_count: Annotated[int, Field(ge=1)] | None = None  # of the whole selection, before positions
    positions: list[Annotated[int, Field(ge=1)]] | None = None  # keep only these (1-based) selected tasks


class Preparation(StrictModel):
    """What `invoke prepare` fetches and builds; its hashes land in the inputs lock."""

    lock: str | None = None  # relative to the recipe file; default locks/<study.id>.inputs.lock
    downloads: list[Download] = []
    sources: list[Source] = []
    steps: list[PrepareStep] = []
    requests: list[RequestSelection] = []
    # Inputs prepare cannot make from public pins (the operator places them); their hash is
    # locked when first seen, and the plan marks them as such.
    provided: list[str] = []
    # Directories under inputs.root whose every file prepare hashes into the lock (weights
    # whose file names the report does not list).
    lock_trees: list[str] = []

    @model_validator(mode="after")
    def _names(self) -> Preparation:
        _unique([d.name for d in self.downloads] + [s.name for s in self.sources], "download/source")
        _unique([s.name for s in self.steps], "prepare step")
        known = {s.name for s in self.sources}
        for r in self.requests:
            if r.source not in known:
                raise ValueError(f"request selection reads source {r.source!r}, which is not a preparation source")
        return self


class Pins(StrictModel):
    """Published facts a rerun must match but no file carries: toolchain, extra commits, constants."""

    toolchain: dict[str, str] = {}  # name -> version, e.g. torch: 2.13.0+cu130
    commits: dict[str, Annotated[str, Field(pattern=COMMIT_RE)]] = {}
    sha256: dict[str, Annotated[str, Field(pattern=SHA256_RE)]] = {}
    temperature: float | None = None
    max_length: Annotated[int, Field(ge=1)] | None = None
    dtype: str | None = None


class Traces(StrictModel):
    """Opt-in Nsight Systems traces, separate from the timed passes (never during them)."""

    enabled: bool = False
    tokens: list[Annotated[int, Field(ge=1)]] = [107, 936, 3399]
    per_length: Annotated[int, Field(ge=1)] = 2
    workload: str  # the workload whose requests are picked by input token count
    backends: list[str] = []  # empty: every backend
    token_counts: str | None = None  # input with per-request token counts, in request order
    nsys_args: list[str] = ["profile", "--trace=cuda,nvtx", "--cuda-graph-trace=node"]
    aux: str | None = None  # wrap this aux process (the GPU worker) instead of the command
    # Issue 43 (evidence/trace_recipe.py, docs/traces.md): `torch` traces requests inside our own
    # backend (started with --trace-dir); kernel families by name patterns, counted per trace.
    profiler: Literal["nsys", "torch"] = "nsys"
    families: Families = {}


class Recipe(StrictModel):
    format_version: Literal[1]
    study: Study
    inputs: Inputs
    workloads: Annotated[list[Workload], Field(min_length=1)]
    backends: Annotated[list[Backend], Field(min_length=1)]
    protocol: Protocol = Protocol()
    controls: Controls = Controls()
    gates: list[Gate] = []
    notes: list[str] = []
    preparation: Preparation | None = None
    pins: Pins = Pins()
    traces: Traces | None = None
    environment: EnvironmentSpec = EnvironmentSpec()
    reproduction: Reproduction | None = None  # issue 38: a rerun's margins (evidence/reproduction.py)

    @model_validator(mode="after")
    def _references(self) -> Recipe:
        if self.reproduction is not None:
            self.reproduction.check_backends([b.name for b in self.backends])
        declared = {f.path for f in self.inputs.files}
        self._check_preparation(declared)
        for w in self.workloads:
            if w.requests not in declared:
                raise ValueError(f"workload {w.name!r} reads {w.requests!r}, which is not a declared input")
        _unique([b.name for b in self.backends], "backend")
        _unique([w.name for w in self.workloads], "workload")
        _unique([g.name for g in self.gates], "gate")
        for g in self.gates:
            self._check_gate(g)
        self._check_url_pins()
        return self

    def _check_url_pins(self) -> None:
        """The study-level Triton cache pin applies to every backend: none may be reached by `url`."""
        reached = [b.name for b in self.backends if not b.launched]
        if reached and self.environment.triton_cache is not None:
            raise ValueError(f"environment.triton_cache pins a cache, but backend {reached[0]!r} is reached by "
                             "`url`, not launched by the study: the pin could not apply to it")

    def _check_gate(self, g: Any) -> None:
        """A gate names only backends and workloads of this recipe."""
        backends = {b.name for b in self.backends}
        for field in ("baseline", "candidate", "a", "b", "backend"):
            ref = getattr(g, field, None)
            if ref is not None and ref not in backends:
                raise ValueError(f"gate {g.name!r}: {field} {ref!r} is not a backend of this recipe")
        wl = getattr(g, "workload", None)
        if wl is not None and wl not in {w.name for w in self.workloads}:
            raise ValueError(f"gate {g.name!r}: workload {wl!r} is not a workload of this recipe")
        if isinstance(g, (KernelTimeReductionGate, GraphReplayGate)):  # trace gates (evidence/trace_recipe.py)
            if self.traces is None or not self.traces.enabled:
                raise ValueError(f"gate {g.name!r}: a trace gate needs traces enabled")
            g.check_recipe(set(self.traces.backends or backends), set(self.traces.families), set(self.traces.tokens))

    def _check_preparation(self, declared: set[str]) -> None:
        unpinned = self.unpinned()
        if unpinned and self.preparation is None:
            raise ValueError(f"inputs {', '.join(unpinned[:3])} are unpinned; only a recipe with a "
                             "`preparation` section may leave a hash to the inputs lock")
        if self.preparation is not None:
            _check_selection_dests(self.preparation, declared)
        self._check_warmup_and_traces()

    def _check_warmup_and_traces(self) -> None:
        """The warm-up's longest_of and the traces name workloads and backends of this recipe."""
        longest_of = self.protocol.warmup.longest_of
        if longest_of is not None and longest_of not in {w.name for w in self.workloads}:
            raise ValueError(f"protocol.warmup.longest_of {longest_of!r} is not a workload of this recipe")
        if self.traces is not None:
            if self.traces.workload not in {w.name for w in self.workloads}:
                raise ValueError(f"traces: workload {self.traces.workload!r} is not a workload of this recipe")
            unknown = set(self.traces.backends) - {b.name for b in self.backends}
            if unknown:
                raise ValueError(f"traces: backends {sorted(unknown)} are not backends of this recipe")

    def unpinned(self) -> list[str]:
        """Paths (inputs and artifacts) whose hash is still 'unpinned'."""
        paths = [f.path for f in self.inputs.files if f.sha256 == UNPINNED]
        return paths + [a.path for b in self.backends for a in b.artifacts if a.sha256 == UNPINNED]

    def passes_for(self, workload: Workload) -> tuple[int, int]:
        """(feasibility, measured) pass counts of a workload, over all its load levels.

        Each level runs `passes_per_level`; pass indexes run on across levels (level k's passes
        follow level k-1's), so every pass of a (backend, workload, phase) has its own index."""
        feas, meas = self.passes_per_level(workload)
        levels = workload.levels()
        count = 1 if levels is None else len(levels)
        return feas * count, meas * count

    def passes_per_level(self, workload: Workload) -> tuple[int, int]:
        """(feasibility, measured) pass counts of one load level (of the workload when it has no load)."""
        feas = self.protocol.feasibility_passes if workload.feasibility_passes is None else workload.feasibility_passes
        meas = self.protocol.measured_passes if workload.measured_passes is None else workload.measured_passes
        return feas, meas

    def backend(self, name: str) -> Backend:
        for b in self.backends:
            if b.name == name:
                return b
        raise RecipeError(f"Recipe {self.study.id} has no backend named {name!r}.")

    def environment_of(self, backend: Backend) -> EnvironmentSpec:
        """The environment a backend must report: the study's defaults, then its own."""
        return self.environment.merged(backend.environment)


def _check_selection_dests(preparation: Preparation, declared: set[str]) -> None:
    """Every request selection of the preparation writes a declared input."""
    for r in preparation.requests:
        if r.dest not in declared:
            raise ValueError(f"request selection writes {r.dest!r}, which is not a declared input")


def _unique(names: list[str], what: str) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{what} names must be unique; repeated: {', '.join(dupes)}")


_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def parse_duration(text: str) -> float:
    """'10m' -> 600.0 seconds. Units: ms, s, m, h."""
    match = _DURATION_RE.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration like 30s, 10m or 1h")
    value, unit = float(match.group(1)), match.group(2)
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


# --- loading with line numbers ---------------------------------------------------------


def _line_map(node: yaml.Node, path: tuple = ()) -> dict[tuple, int]:
    """Map each field path (keys and list indices) to its 1-based line in the YAML text."""
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            lines[path + (key.value,)] = key.start_mark.line + 1
            lines.update({k: v for k, v in _line_map(value, path + (key.value,)).items() if k != path + (key.value,)})
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines.update(_line_map(item, path + (index,)))
    return lines


def _nearest_line(lines: dict[tuple, int], loc: tuple) -> int:
    # pydantic adds discriminator tags to locations; drop unknown parts until a match.
    parts = tuple(loc)
    while parts:
        if parts in lines:
            return lines[parts]
        parts = tuple(p for p in parts[:-1])
    return lines.get((), 1)


def _format_loc(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _bad_scalar_line(node: yaml.Node | None) -> int:
    """Line of the first scalar (a date, say) that SafeLoader cannot construct; 1 if none is found."""
    loader = yaml.SafeLoader("")
    stack = [node] if node is not None else []
    while stack:
        item = stack.pop(0)
        if isinstance(item, yaml.ScalarNode):
            try:
                loader.construct_object(item)
            except ValueError:
                return item.start_mark.line + 1
        elif isinstance(item, yaml.MappingNode):
            stack.extend(v for pair in item.value for v in pair)
        elif isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)
    return 1


def parse_recipe(text: str, source: str = "<recipe>") -> Recipe:
    """Parse and validate recipe text; every problem names source:line and the field path."""
    node, data = _load_yaml(text, source)
    _check_top_level(data, source)
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, node, source) from None


def _load_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The recipe's YAML node tree (for line numbers) and its data; bad YAML is a RecipeError."""
    try:
        node = yaml.compose(text, Loader=NoAliasLoader)
        data = safe_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise RecipeError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}.") from None
    except ValueError as exc:  # a scalar YAML resolves but cannot build, e.g. the date 2026-13-45
        line = _bad_scalar_line(node)
        raise RecipeError(f"{source}:{line}: not a valid value: {exc}.") from None
    return node, data


def _check_top_level(data: Any, source: str) -> None:
    """A recipe is a mapping whose format_version this tool reads."""
    if not isinstance(data, dict):
        raise RecipeError(f"{source}:1: a recipe is a YAML mapping with format_version, study, inputs, ...")
    version = data.get("format_version")
    if version != RECIPE_FORMAT_VERSION:
        raise RecipeError(
            f"{source}: format_version {version!r} is not supported; this tool reads format_version {RECIPE_FORMAT_VERSION}."
        )


def _invalid(exc: ValidationError, node: yaml.Node | None, source: str) -> RecipeError:
    """One RecipeError listing each validation problem as source:line: field: message."""
    lines = _line_map(node) if node is not None else {}
    problems = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.endswith("Gate")) and p not in _GATE_KINDS)
        line = _nearest_line(lines, loc)
        problems.append(f"{source}:{line}: {_format_loc(loc)}: {err['msg']}")
    if len(problems) == 1:  # one problem, one line
        return RecipeError(f"Recipe is invalid: {problems[0]}")
    return RecipeError("Recipe is invalid:\n  " + "\n  ".join(problems))


_GATE_KINDS = {"mean_reduction", "max_probability_delta", "decisions_unchanged", "probabilities_stable",
               "gpu_not_throttled", "external"}


def read_yaml(path: str | Path, what: str) -> Any:
    """A YAML file's content; a missing file or bad YAML is a RecipeError naming `what` and the path."""
    try:
        return safe_yaml(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RecipeError(f"No {what} at {path}.") from exc
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}).") from None
    except OSError as exc:
        raise RecipeError(f"Cannot read the {what} {path} ({exc.strerror or exc}).") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML ({' '.join(str(exc).split())}).") from None


def load_recipe(path: str | Path) -> Recipe:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise RecipeError(f"No recipe at {path}.") from exc
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{path}: a recipe is UTF-8 text; byte {exc.start} is not.") from None
    except OSError as exc:
        raise RecipeError(f"Cannot read the recipe {path} ({exc.strerror or exc}).") from None
    return parse_recipe(text, source=str(path))


def inputs_root(recipe_path: str | Path, recipe: Recipe, override: str | Path | None = None) -> Path:
    """The absolute directory every input path is relative to."""
    if override is not None:
        return Path(override).resolve()
    root = Path(recipe.inputs.root)
    return root if root.is_absolute() else (Path(recipe_path).resolve().parent / root).resolve()


def lock_path(recipe: Recipe, recipe_path: str | Path) -> Path:
    """Where `invoke prepare` writes (and `invoke study` reads) this recipe's inputs lock."""
    base = Path(recipe_path).resolve().parent
    rel = recipe.preparation.lock if recipe.preparation and recipe.preparation.lock else None
    return base / (rel or f"locks/{recipe.study.id}.inputs.lock")


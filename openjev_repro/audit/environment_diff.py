"""compare's "Environment differences": what differed between the two runs of each backend pair,
from each run's environment.json, backends.json, host.json, environment_check.json and
kernel_caches.json (any of which an older run may lack: then that item is "not recorded", never a
difference).

Items: packages, kernel implementations, dtype, weights fingerprint, project commit + dirty flag +
source digest, GPU model and driver, torch threads, CPU model, load average, container image; what
actually ran (issue 39): the shared objects the backend mapped (added, removed, same path with another
sha256), its kernel caches' digests and the autotuned choice of each kernel; plus the drift a run
recorded (--allow-environment-drift, a pinned kernel cache that changed). When decisions or
probabilities differ, `explanations` names the recorded differences that can explain it.

Each file is decoded once into typed views of the fields read here (`_EnvironmentFile`, `_BackendEntry`,
...); a part whose shape is not the one written (an older or damaged file) reads as not recorded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ..errors import EvidenceError
from ..evidence.identity import RuntimeIdentity, cache_digest_text
from ..evidence.rundir import RunDir
from ..study.kernel_caches import KernelCachesRecord

__all__ = ["EnvironmentDifference", "RunEnvironment", "environment_differences", "explanations", "project_note"]

# Differences that can change probabilities (kernels, numerics, weights, code, the kernels a process
# loaded or tuned); the others (CPU model, load, threads) mostly move latency.
NUMERIC_ITEMS = ("implementations", "packages", "dtype", "weights_fingerprint", "project_source", "gpu", "drift",
                 "libraries", "kernel_caches", "autotune")
SHOWN = 6  # of a long list of differing libraries or kernels, this many are named
LOAD_RATIO, LOAD_STEP = 1.25, 0.5  # 1-minute load averages this far apart differ
# A mapped object inside a run's own kernel cache (Triton's launcher, Inductor's C++ kernels) is named
# by its place in the cache, so two runs' caches compare by content, not by their folders' names.
_IN_CACHE = re.compile(r"^.*\.kernel-caches/[^/]+/(triton|inductor)/")
T = TypeVar("T")

# The views below name only the fields read here; msgspec leaves the files' other keys alone.


class _Git(msgspec.Struct, frozen=True):
    commit: str | None = None
    dirty: bool | None = None


class _Digest(msgspec.Struct, frozen=True):
    sha256: str | None = None


class _Cpu(msgspec.Struct, frozen=True):
    model: str | None = None
    cores_usable: int | None = None
    load_average_1_5_15: tuple[float, float, float] | None = None


class _Device(msgspec.Struct, frozen=True):
    name: str | None = None
    driver_version: str | None = None


class _Driver(msgspec.Struct, frozen=True):
    version: str | None = None


class _HostDevice(msgspec.Struct, frozen=True):
    name: str | None = None
    driver: _Driver | None = None


class _Image(msgspec.Struct, frozen=True):
    id: str | None = None
    repo_digests: tuple[str, ...] = ()


class _EnvironmentFile(msgspec.Struct, frozen=True):
    project_git: msgspec.Raw = msgspec.Raw(b"null")
    project_source: msgspec.Raw = msgspec.Raw(b"null")
    cpu: msgspec.Raw = msgspec.Raw(b"null")
    host: msgspec.Raw = msgspec.Raw(b"null")
    gpus: msgspec.Raw = msgspec.Raw(b"null")
    container_images: msgspec.Raw = msgspec.Raw(b"null")
    backends: msgspec.Raw = msgspec.Raw(b"null")


class _Devices(msgspec.Struct, frozen=True):
    devices: tuple[msgspec.Raw, ...] = ()


class _HostFile(msgspec.Struct, frozen=True):
    device: msgspec.Raw = msgspec.Raw(b"null")


class _EnvBackend(msgspec.Struct, frozen=True):
    packages: dict[str, msgspec.Raw] | None = None


class _BackendEntry(msgspec.Struct, frozen=True):
    packages: dict[str, msgspec.Raw] | None = None
    kernels: dict[str, msgspec.Raw] | None = None
    implementations: dict[str, msgspec.Raw] | None = None
    dtype: msgspec.Raw = msgspec.Raw(b"null")
    weights_fingerprint: msgspec.Raw = msgspec.Raw(b"null")
    torch_threads: msgspec.Raw = msgspec.Raw(b"null")
    torch_interop_threads: msgspec.Raw = msgspec.Raw(b"null")
    runtime_identity: msgspec.Raw = msgspec.Raw(b"null")
    autotune_after_passes: msgspec.Raw = msgspec.Raw(b"null")  # FLA's in-memory choices (runs from 2026-12)


class _BackendsFile(msgspec.Struct, frozen=True):
    backends: dict[str, msgspec.Raw] = {}


class _CheckBackend(msgspec.Struct, frozen=True):
    differences: tuple[str, ...] = ()


class _CheckFile(msgspec.Struct, frozen=True):
    backends: dict[str, msgspec.Raw] = {}


def _as(raw: msgspec.Raw | bytes | None, kind: type[T]) -> T | None:
    """`raw` decoded as `kind`; None where it is absent, null or of another shape."""
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=kind | None)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _file(run: RunDir, name: str, kind: type[T]) -> T | None:
    path = run.file(name)
    try:
        return _as(path.read_bytes(), kind) if path.is_file() else None
    except OSError:
        return None


def _text(raw: msgspec.Raw) -> str | None:
    """A value that is text; None for absent values and {"available": false} markers."""
    return _as(raw, str)


def _shown(value: msgspec.Raw) -> str:
    """A recorded value as one phrase: text as it is, anything else as its JSON."""
    text = _text(value)
    return text if text is not None else bytes(value).decode("utf-8", "replace")


class EnvironmentDifference(msgspec.Struct, frozen=True):
    """One difference between the two runs of a pair: the item it belongs to and one phrase."""

    item: str
    text: str


class RunEnvironment:
    """One run's recorded environment, each file read and decoded once."""

    def __init__(self, directory: Path) -> None:
        run = RunDir(Path(directory))
        self.env = _file(run, "environment.json", _EnvironmentFile) or _EnvironmentFile()
        self.backends = (_file(run, "backends.json", _BackendsFile) or _BackendsFile()).backends
        self.host = _file(run, "host.json", _HostFile) or _HostFile()
        self.check = (_file(run, "environment_check.json", _CheckFile) or _CheckFile()).backends
        try:
            self.caches = KernelCachesRecord.read(run)
        except EvidenceError:
            self.caches = None
        self.cpu = _as(self.env.cpu, _Cpu) or _Cpu()

    def project(self) -> tuple[str | None, bool | None, str | None]:
        """(commit, dirty, source sha256) as environment.json recorded them."""
        git = _as(self.env.project_git, _Git) or _Git()
        return git.commit, git.dirty, (_as(self.env.project_source, _Digest) or _Digest()).sha256

    def gpu(self) -> str | None:
        devices = (_as(self.env.gpus, _Devices) or _Devices()).devices
        first = _as(devices[0], _Device) if devices else None
        if first is not None:
            return f"{first.name} driver {first.driver_version}"
        device = _as(self.host.device, _HostDevice)
        return f"{device.name} driver {device.driver.version if device.driver else None}" if device else None

    def load(self) -> tuple[float, int | None] | None:
        """The 1-minute load average when the run started, and the usable cores it is over."""
        averages = self.cpu.load_average_1_5_15
        return (averages[0], self.cpu.cores_usable) if averages is not None else None

    def image(self, backend: str) -> str | None:
        images = _as(self.env.container_images, dict[str, msgspec.Raw]) or {}
        image = _as(images[backend], _Image) if backend in images else None
        return None if image is None else (image.repo_digests[0] if image.repo_digests else image.id)

    def entry(self, backend: str) -> _BackendEntry:
        return _as(self.backends[backend], _BackendEntry) or _BackendEntry() if backend in self.backends \
            else _BackendEntry()

    def packages(self, backend: str, entry: _BackendEntry) -> dict[str, str] | None:
        packages = entry.packages
        if packages is None:
            envs = _as(self.env.backends, dict[str, msgspec.Raw]) or {}
            packages = (_as(envs[backend], _EnvBackend) or _EnvBackend()).packages if backend in envs else None
        return None if packages is None else {k: _text(v) or "not installed" for k, v in packages.items()}

    def identity(self, entry: _BackendEntry) -> RuntimeIdentity | None:
        return _as(entry.runtime_identity, RuntimeIdentity)

    def items(self, backend: str) -> dict[str, Any]:
        """item -> recorded value (None: not recorded) for one backend of this run."""
        entry = self.entry(backend)
        kernels = entry.kernels if entry.kernels is not None else entry.implementations
        threads = _as(entry.torch_threads, int)
        commit, dirty, source = self.project()
        identity = self.identity(entry)
        return {"packages": self.packages(backend, entry),
                "implementations": None if kernels is None else {k: _shown(v) for k, v in kernels.items()},
                "dtype": _text(entry.dtype), "weights_fingerprint": _text(entry.weights_fingerprint),
                "project_commit": _project_text(commit, dirty), "project_source": source,
                "gpu": self.gpu(), "torch_threads": None if threads is None else
                f"{threads}/{_as(entry.torch_interop_threads, int)}",
                "cpu_model": self.cpu.model or (_as(self.env.host, _Cpu) or _Cpu()).model,
                "container_image": self.image(backend),
                "libraries": None if identity is None else Libraries.of(identity),
                "kernel_caches": self.cache_digests(backend, identity),
                "autotune": self.autotune(entry, identity)}

    def cache_digests(self, backend: str, identity: RuntimeIdentity | None) -> dict[str, str] | None:
        """kind -> the digest of the cache the backend ran with (after its passes)."""
        recorded = self.caches.backends.get(backend) if self.caches is not None else None
        if recorded:
            digests = {c.kind: c.before if isinstance(c.after, msgspec.UnsetType) else c.after for c in recorded}
            return {kind: cache_digest_text(d.sha256, d.paths, d.files) for kind, d in digests.items()}
        return identity.cache_digests() or None if identity is not None else None

    def autotune(self, entry: _BackendEntry, identity: RuntimeIdentity | None) -> dict[str, str] | None:
        """kernel -> its chosen configuration as one phrase: from the caches, and FLA's in-memory choices."""
        found = {} if identity is None else {k: ", ".join(f"{n}: {x}" for n, x in sorted(v.items()))
                                                  for k, v in identity.autotune.items()}
        tuned = _as(entry.autotune_after_passes, dict[str, dict[str, str]]) or {}
        found |= {f"{kernel} {key}": config for kernel, keys in tuned.items() for key, config in keys.items()}
        return found or None

    def drift(self, backend: str) -> list[str]:
        check = _as(self.check[backend], _CheckBackend) if backend in self.check else None
        pinned = self.caches.differences(backend) if self.caches is not None else []
        return [*(check.differences if check else ()), *pinned]


def _config(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(values.items()))


def _project_text(commit: str | None, dirty: bool | None) -> str | None:
    return f"{commit[:12]}{' (dirty)' if dirty else ''}" if commit else None


def _listed(item: str, phrases: list[str]) -> list[EnvironmentDifference]:
    """At most SHOWN phrases of one item, then how many more."""
    more = [f"{item}: and {len(phrases) - SHOWN} more"] if len(phrases) > SHOWN else []
    return [EnvironmentDifference(item, text) for text in phrases[:SHOWN] + more]


class Libraries(msgspec.Struct, frozen=True):
    """The shared objects one backend had hashed when /health was read (path -> sha256, a run's own
    kernel cache written <kind cache>/), and how many mapped ones were not hashed yet."""

    digests: dict[str, str]
    pending: int

    @classmethod
    def of(cls, identity: RuntimeIdentity) -> Libraries:
        return cls({_IN_CACHE.sub(r"<\1 cache>/", path): sha for path, sha in identity.library_digests().items()},
                   identity.pending)

    def differences(self, other: Libraries) -> list[EnvironmentDifference]:
        """Shared objects only one backend mapped, and the same path with two digests. A library only one
        side lists is a difference only where the other had hashed all it mapped: else it may be pending."""
        a, b = self.digests, other.digests
        phrases = [f"libraries: only the baseline mapped {p}" for p in sorted(set(a) - set(b)) if not other.pending]
        phrases += [f"libraries: only the candidate mapped {p}" for p in sorted(set(b) - set(a)) if not self.pending]
        phrases += [f"libraries: {p} has sha256 {a[p][:12]} vs {b[p][:12]}" for p in sorted(set(a) & set(b))
                    if a[p] != b[p]]
        return _listed("libraries", phrases)


def _dict_differences(item: str, a: dict, b: dict) -> list[EnvironmentDifference]:
    """Keys whose values differ, or that one run recorded with a value and the other did not."""
    missing = "not recorded"
    phrases = [f"{item}.{k}: {a.get(k, missing)} vs {b.get(k, missing)}" for k in sorted(set(a) | set(b))
               if a.get(k) != b.get(k) and (a.get(k) or b.get(k))]
    return _listed(item, phrases) if item == "autotune" else [EnvironmentDifference(item, p) for p in phrases]


def _item_differences(item: str, a: Any, b: Any) -> list[EnvironmentDifference]:
    if isinstance(a, Libraries) and isinstance(b, Libraries):
        return a.differences(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return _dict_differences(item, a, b)
    if isinstance(a, (dict, Libraries)) or isinstance(b, (dict, Libraries)):
        return [EnvironmentDifference(item, f"{item}: recorded by one run only")]
    return [] if a == b else [EnvironmentDifference(item, f"{item}: {a or 'not recorded'} vs {b or 'not recorded'}")]


def _load_difference(a: tuple[float, int | None] | None,
                     b: tuple[float, int | None] | None) -> list[EnvironmentDifference]:
    """The machines' 1-minute load when each run started, when they differ enough to move latency."""
    if a is None or b is None:
        return []
    low, high = sorted((a[0], b[0]))
    if high - low < LOAD_STEP or high < LOAD_RATIO * low:
        return []
    cores = "" if a[1] is None or b[1] is None else f" on {a[1]} vs {b[1]} cores"
    text = f"load_average (1 minute, at the start): {a[0]:g} vs {b[0]:g}{cores}"
    return [EnvironmentDifference("load_average", text)]


def environment_differences(base: RunEnvironment, cand: RunEnvironment, base_name: str,
                            cand_name: str) -> dict[str, Any]:
    """Per item: the difference (baseline vs candidate), and which items neither run recorded."""
    ia, ib = base.items(base_name), cand.items(cand_name)
    found = [d for item in ia if ia[item] is not None or ib[item] is not None
             for d in _item_differences(item, ia[item], ib[item])]
    found += _load_difference(base.load(), cand.load())
    for role, env, name in (("baseline", base, base_name), ("candidate", cand, cand_name)):
        found += [EnvironmentDifference("drift", f"{role} measured with allowed environment drift: {d}")
                  for d in env.drift(name)]
    not_recorded = [i for i in ia if ia[i] is None and ib[i] is None]
    return {"differences": msgspec.to_builtins(found), "not_recorded": not_recorded}


class _Answers(msgspec.Struct, frozen=True):
    decision_flips: tuple[object, ...] | None = None
    max_abs_probability_delta: float | None = None


class _Environment(msgspec.Struct, frozen=True):
    differences: tuple[EnvironmentDifference, ...] = ()


class _Pair(msgspec.Struct, frozen=True):
    """What `explanations` reads of one of compare's pairs."""

    workload: str
    baseline_backend: str
    candidate_backend: str
    answers: _Answers | None = None
    environment: _Environment | None = None


def _explanation_texts(found: list[EnvironmentDifference]) -> list[str]:
    """What can explain a drift, in words: FLA in one run only, autotuned choices, each other difference."""
    items = {d.item for d in found}
    fla = any(d.item in ("packages", "implementations") and "fla" in d.text.lower() for d in found)
    texts = ["FLA kernels in one run and not the other"] if fla else []
    tuned = sum(d.item == "autotune" for d in found)
    texts += [f"autotuned kernels chose differently ({tuned} listed below)"] if tuned else []
    texts += [d.text for d in found if d.item not in ("drift", "autotune")]
    return texts + (["the allowed environment drift listed below"] if "drift" in items else [])


def explanations(pair: dict[str, Any]) -> list[str]:
    """The recorded differences that can explain differing decisions or probabilities of a pair."""
    seen = msgspec.convert(pair, _Pair)
    answers = seen.answers or _Answers()
    flips, delta = answers.decision_flips or (), answers.max_abs_probability_delta
    if not flips and not delta:
        return []
    found = [d for d in (seen.environment or _Environment()).differences if d.item in NUMERIC_ITEMS]
    where = f"{seen.workload}/{seen.baseline_backend}→{seen.candidate_backend}"
    what = f"{len(flips)} decision flips, max |Δp| {delta!r}"
    if not found:
        return [f"{where}: {what}; no recorded environment difference explains it"]
    return [f"{where}: {what}; can be explained by " + "; ".join(_explanation_texts(found))]


def _same_clean_commit(a: tuple[str | None, bool | None, str | None], b: tuple[str | None, bool | None, str | None],
                       ) -> bool:
    return bool(a[0]) and a[0] == b[0] and a[1] is False and b[1] is False


def project_note(base: RunEnvironment, cand: RunEnvironment) -> str | None:
    """A line when the two runs ran different project code (or one cannot tell)."""
    a, b = base.project(), cand.project()
    if a[2] and b[2]:
        if a[2] == b[2]:
            return None
        return (f"the two runs ran different project code: source digest {a[2][:12]} vs "
                f"{b[2][:12]} (commits {_project_text(*a[:2])} vs {_project_text(*b[:2])})")
    if _same_clean_commit(a, b):
        return None
    recorded = "one run only" if a[2] or b[2] else "neither run"
    return (f"the two runs may have run different project code: commits {_project_text(*a[:2]) or 'not recorded'} vs "
            f"{_project_text(*b[:2]) or 'not recorded'}; a source digest is recorded by {recorded}")


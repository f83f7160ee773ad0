"""`invoke reproduce`: did a rerun reproduce a study? (issue 38)

REPRODUCED, NOT REPRODUCED, NOT COMPARABLE or INCONCLUSIVE, in that order of reading:

1. Each run is verified with its own key (`verify`); a run that does not verify gets no verdict.
2. Margins: the original's pre-registration, else its signed recipe's `reproduction:` section, else the
   documented defaults (evidence/reproduction.py); the verdict names which, with the policy's sha256.
3. Comparability: every must-match field (GPU model, weights, tokenizer and request digests, case order,
   prompt format, timing boundary, quantile rule, pinned kernel caches, ...) equal, else NOT COMPARABLE
   naming each field and both values; should-match differences are listed as possible explanations.
4. Equivalence, per workload and backend (results/equivalence.py): mean, P50 and P95 as ratio bands,
   max |Δp| and decision flips exactly.

Overall: NOT COMPARABLE if any must-match field differs, else NOT REPRODUCED if any judged metric is,
else INCONCLUSIVE if any is, else REPRODUCED.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path

import msgspec

from ..errors import EvidenceError, RecipeError, ReproError
from ..evidence.recipe import Recipe, parse_recipe
from ..evidence.records import backends_of, calibration_of, environment_of, host_of, inputs_of, plan_of
from ..evidence.reproduction import DEFAULT_REPRODUCTION, ComparabilityField, Reproduction
from ..evidence.rundir import ENVELOPE_NAME, RunDir
from ..evidence.summary import read_summary
from ..manifest.preregistration import PREREGISTRATION_NAME, read_preregistration
from ..results.equivalence import (
    METRICS,
    LatencyJudgement,
    Outcome,
    ProbabilityJudgement,
    judge_latency,
    judge_probabilities,
    paired_passes,
)
from ..results.row_table import RowTable, read_table
from .bundle import opened
from .environment_diff import RunEnvironment

__all__ = [
    "DEFAULT_SEED",
    "BackendResult",
    "Comparability",
    "FieldValues",
    "MarginSource",
    "ReproductionVerdict",
    "RunUnderTest",
    "VerdictKind",
    "judge",
    "margins_of",
    "opened_runs",
]

DEFAULT_SEED = 20261204


class VerdictKind(StrEnum):
    REPRODUCED = "REPRODUCED"
    NOT_REPRODUCED = "NOT REPRODUCED"
    NOT_COMPARABLE = "NOT COMPARABLE"
    INCONCLUSIVE = "INCONCLUSIVE"

    @property
    def exit_code(self) -> int:
        return {"REPRODUCED": 0, "NOT REPRODUCED": 3, "NOT COMPARABLE": 4, "INCONCLUSIVE": 5}[self.value]


# --- the runs ----------------------------------------------------------------------------------


class _PredicateView(msgspec.Struct, frozen=True):
    timing_boundary: msgspec.Raw = msgspec.Raw(b"null")


class _StatementView(msgspec.Struct, frozen=True):
    predicate: _PredicateView = _PredicateView()


@dataclass
class RunUnderTest:
    """One run (a directory, or a bundle opened into one), verified, and what a verdict reads of it."""

    given: Path
    directory: Path
    manifest_sha256: str | None
    recipe: Recipe
    table: RowTable = field(repr=False)

    @classmethod
    def read(cls, given: Path, directory: Path) -> RunUnderTest:
        run = RunDir(directory)
        envelope = run.file(ENVELOPE_NAME)
        digest = hashlib.sha256(envelope.read_bytes()).hexdigest() if envelope.is_file() else None
        try:
            recipe = parse_recipe(run.file("recipe.yaml").read_text(encoding="utf-8"), f"{given}/recipe.yaml")
        except (OSError, RecipeError) as exc:
            raise EvidenceError(f"{given}: its recipe.yaml cannot be read ({exc}).") from None
        return cls(given, directory, digest, recipe, read_table(run.rows_path))

    @property
    def run(self) -> RunDir:
        return RunDir(self.directory)

    def measured(self) -> list[tuple[str, str]]:
        """(workload, backend) of every measured pass, in the run's order."""
        return list(self.table.by_pass("measured", ok_only=True))


def _verify(given: Path, directory: Path, pubkey: Path) -> None:
    from .verify import verify_dir

    imported = (directory / "import.json").is_file() and not (directory / ENVELOPE_NAME).exists()
    checks = verify_dir(directory, pubkey=None if imported else pubkey)  # an import is checked by its digests
    failed = [c for c in checks if c.passed is False]
    if failed:
        first = failed[0]
        raise EvidenceError(f"{given} does not verify with {pubkey} ({len(failed)} of {len(checks)} checks "
                            f"failed; first: {first.name}: {first.detail.splitlines()[0] if first.detail else ''}); "
                            "no verdict.")


@contextlib.contextmanager
def opened_runs(original: Path, rerun: Path, pubkey: Path, original_pubkey: Path,
                original_option: str = "--original-pubkey") -> Iterator[tuple[RunUnderTest, RunUnderTest]]:
    """Both runs opened (a bundle extracted), each verified with its own key: the user's, never one found
    inside the runs."""
    from ..manifest.keys import trusted_public_key

    for path, option in ((original, "--original"), (rerun, "--rerun")):
        if not path.exists():
            raise EvidenceError(f"{option} {path}: no run directory or bundle there.")
    trusted_public_key(pubkey, rerun)
    trusted_public_key(original_pubkey, original, option=original_option)
    with opened(original) as a, opened(rerun) as b:
        _verify(original, a, original_pubkey)
        _verify(rerun, b, pubkey)
        yield RunUnderTest.read(original, a), RunUnderTest.read(rerun, b)


# --- margins -----------------------------------------------------------------------------------


class MarginSource(StrEnum):
    PREREGISTRATION = "the original's pre-registration"
    RECIPE = "the original's signed recipe"
    DEFAULTS = "documented defaults (the original declares none)"


def margins_of(original: RunUnderTest, pubkey: Path) -> tuple[Reproduction, MarginSource]:
    if original.run.file(PREREGISTRATION_NAME).is_file():
        registered = read_preregistration(original.run, pubkey).margins
        if registered is not None:
            return registered, MarginSource.PREREGISTRATION
    if original.recipe.reproduction is not None:
        return original.recipe.reproduction, MarginSource.RECIPE
    return DEFAULT_REPRODUCTION, MarginSource.DEFAULTS


# --- comparability -----------------------------------------------------------------------------

NOT_RECORDED = "not recorded"
_PER_BACKEND = object()  # what a study-level read answers for a field each backend has its own value of


@dataclass(frozen=True)
class FieldValues:
    field: ComparabilityField
    where: str  # "study" or a backend's name
    original: str
    rerun: str

    @property
    def differs(self) -> bool:
        return self.original != self.rerun

    @property
    def recorded(self) -> bool:
        return self.original != NOT_RECORDED or self.rerun != NOT_RECORDED

    def text(self) -> str:
        where = "" if self.where == "study" else f" ({self.where})"
        return f"{self.field}{where}: {self.original} vs {self.rerun}"


def _text(value: object) -> str:
    if value is None or value == {} or value == []:
        return NOT_RECORDED
    if isinstance(value, dict):
        return ", ".join(f"{k} {_text(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return ", ".join(map(_text, value))
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(value)).split())[:200]


def _short(digest: str | None) -> str | None:
    return None if digest is None else digest[:12]


class _Facts:
    """The comparability fields of one run, each read once from its records."""

    def __init__(self, run: RunUnderTest) -> None:
        self.run = run
        directory = run.run
        self.environment = environment_of(directory)
        self.host = host_of(directory)
        self.backends = backends_of(directory).backends
        self.inputs = inputs_of(directory)
        self.recorded = RunEnvironment(run.directory)
        self.case_ids = _case_ids(directory)
        self.boundary = _timing_boundary(directory)
        self.quantiles = _quantile_rules(directory)

    def study(self, name: ComparabilityField) -> object:
        """A study-level field's value; `_PER_BACKEND` for a field each backend has its own value of."""
        return self._study_values.get(name, _PER_BACKEND)

    @cached_property
    def _study_values(self) -> dict[str, object]:
        return {
            "backends": sorted({b for _, b in self.run.measured()}),
            "gpu_model": self._gpu_model(),
            "gpu_driver": self._gpu_driver(),
            "gpu_clocks": self._gpu_clocks(),
            "gpu_power_limit": None,  # not recorded by any run yet (nvidia-smi's text beside some runs only)
            "cpu_model": self.environment.cpu_model,
            "tokenizer": self._inputs_with_role("tokenizer"),
            "requests": self._workload_requests(),
            "case_order": self._case_order(),
            "timing_boundary": self.boundary,
            "quantile_rule": self.quantiles,
            "project_source": _short(self.recorded.project()[2]),
        }

    def backend(self, name: ComparabilityField, backend: str) -> object:
        if name == "weights_fingerprint":
            facts = self.backends.get(backend)
            return facts.weights_fingerprint if facts is not None else None
        if name == "prompt_format":
            return self._prompt_format(backend)
        if name == "kernel_caches":
            return self._pinned_caches(backend)
        items = self.recorded.items(backend)
        value = items.get(name)
        if name == "libraries" and isinstance(value, dict):
            return f"{len(value)} shared objects, sha256 of the list {_list_digest(value)}"
        if name == "autotune" and isinstance(value, dict):
            return f"{len(value)} kernels, sha256 of the choices {_list_digest(value)}"
        return value

    def _gpu_model(self) -> str:
        names = self.environment.gpu_names(self.environment.run_time_uuid)
        if names:
            return ", ".join(names)
        device = self.host.device if self.host is not None else None
        return device.name if device is not None else "no GPU"

    def _gpu_driver(self) -> str | None:
        device = self.host.device if self.host is not None else None
        return device.driver.version if device is not None else None

    def _gpu_clocks(self) -> str | None:
        found = set()
        for d in self.environment.gpu_devices:
            clocks = d.clocks_mhz
            if isinstance(clocks, msgspec.UnsetType):
                continue
            found.add(f"SM max {_text(clocks.sm_max)} MHz, memory {_text(clocks.memory)} MHz")
        return ", ".join(sorted(found)) or None

    def _inputs_with_role(self, word: str) -> list[str] | None:
        if self.inputs is None:
            return None
        return sorted(f"{_short(e.actual)}" for e in self.inputs.files if word in e.role.lower() and e.actual)

    def _workload_requests(self) -> dict[str, str | None] | None:
        if self.inputs is None:
            return None
        digests = {e.path: e.actual for e in self.inputs.files}
        return {w.name: _short(digests.get(w.requests)) for w in self.run.recipe.workloads}

    def _case_order(self) -> dict[str, str] | None:
        if not self.case_ids:
            return None
        return {w: f"{len(ids)} cases, sha256 {_list_digest(ids)}" for w, ids in self.case_ids.items()}

    def _prompt_format(self, backend: str) -> str | None:
        """As /health reported it, else as the backend's command names it; else not recorded (a default
        is not assumed: it changed between versions of the reference backend)."""
        facts = self.backends.get(backend)
        reported = facts.prompt_format if facts is not None else None
        if isinstance(reported, str):
            return reported
        declared = next((b for b in self.run.recipe.backends if b.name == backend), None)
        command = list(declared.command or []) if declared is not None else []
        return command[command.index("--prompt-format") + 1] if "--prompt-format" in command[:-1] else None

    def _pinned_caches(self, backend: str) -> str:
        declared = next((b for b in self.run.recipe.backends if b.name == backend), None)
        caches = declared.kernel_caches if declared is not None else None
        pinned = list(caches.pinned) if caches is not None else []
        return ", ".join(sorted(p.sha256[:12] for p in pinned)) if pinned else "not pinned"



def _list_digest(value: object) -> str:
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()[:12]


def _raw_text(raw: msgspec.Raw | None) -> str | None:
    if raw is None:
        return None
    value = msgspec.json.decode(raw)
    return value if isinstance(value, str) else msgspec.json.encode(value, order="sorted").decode()


def _case_ids(run: RunDir) -> dict[str, list[str]] | None:
    """plan.json's planned case order; None for a run without one (or an imported run's other shape)."""
    try:
        plan = plan_of(run)
    except ReproError:
        return None
    return None if plan is None or plan.case_ids is None else {k: list(v) for k, v in plan.case_ids.items()}


def _timing_boundary(run: RunDir) -> str | None:
    """What a latency measures, as the run states it (calibration.json, the signed predicate), else the row
    contract a manifest names by default; None for a run without a manifest that states none."""
    try:
        calibration = calibration_of(run)
    except ReproError:
        calibration = None
    if calibration is not None:
        return calibration.timing_boundary
    statement = _read_manifest_view(run)
    predicate = statement.predicate.timing_boundary if statement is not None else None
    if predicate is not None and bytes(predicate) != b"null":
        return _raw_text(predicate)
    if statement is None:
        return None
    from ..manifest.run_manifest import TIMING_BOUNDARY

    return _raw_text(msgspec.Raw(msgspec.json.encode(TIMING_BOUNDARY)))


def _read_manifest_view(run: RunDir) -> _StatementView | None:
    from ..manifest.dsse import parse_envelope, payload_of

    path = run.file(ENVELOPE_NAME)
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(payload_of(parse_envelope(path.read_bytes(), str(path))), type=_StatementView)
    except (msgspec.DecodeError, ReproError):
        return None


def _quantile_rules(run: RunDir) -> str | None:
    path = run.file("summary.json")  # decoded by its record, Summary
    try:
        summary = read_summary(path)
    except (ReproError, OSError, ValueError):
        return None
    return "; ".join(f"{k}: {v}" for k, v in sorted(summary.p95_rules.items()))


@dataclass(frozen=True)
class Comparability:
    must: list[FieldValues]
    should: list[FieldValues]

    @property
    def differing(self) -> list[FieldValues]:
        return [f for f in self.must if f.differs]

    @property
    def explanations(self) -> list[FieldValues]:
        return [f for f in self.should if f.differs]

    @property
    def not_recorded(self) -> list[str]:
        fields = self.must + self.should
        return sorted({f.field for f in fields} - {f.field for f in fields if f.recorded})


def _values(fields: tuple[ComparabilityField, ...], a: _Facts, b: _Facts, backends: list[str]) -> list[FieldValues]:
    out = []
    for name in fields:
        study = a.study(name)
        if study is not _PER_BACKEND:
            out.append(FieldValues(name, "study", _text(study), _text(b.study(name))))
            continue
        out += [FieldValues(name, backend, _text(a.backend(name, backend)), _text(b.backend(name, backend)))
                for backend in backends]
    return out


def comparability(original: RunUnderTest, rerun: RunUnderTest, policy: Reproduction) -> Comparability:
    a, b = _Facts(original), _Facts(rerun)
    backends = sorted({x for _, x in original.measured()} & {x for _, x in rerun.measured()})
    return Comparability(_values(policy.must_match, a, b, backends), _values(policy.should_match, a, b, backends))


# --- the verdict -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackendResult:
    workload: str
    backend: str
    latency: list[LatencyJudgement]
    answers: ProbabilityJudgement | None

    @property
    def outcomes(self) -> list[Outcome]:
        found = [j.outcome for j in self.latency]
        if self.answers is not None:
            found += self.answers.outcomes
        return found


@dataclass(frozen=True)
class ReproductionVerdict:
    """What `invoke reproduce` decided of a rerun against its original, with both runs, the margins and every
    backend's judgements."""

    kind: VerdictKind
    original: RunUnderTest
    rerun: RunUnderTest
    policy: Reproduction
    source: MarginSource
    comparable: Comparability
    results: list[BackendResult]
    seed: int

    @property
    def policy_sha256(self) -> str:
        return self.policy.digest()


def _overall(comparable: Comparability, results: list[BackendResult]) -> VerdictKind:
    if comparable.differing:
        return VerdictKind.NOT_COMPARABLE
    outcomes = [o for r in results for o in r.outcomes]
    if Outcome.NOT_REPRODUCED in outcomes:
        return VerdictKind.NOT_REPRODUCED
    if Outcome.INCONCLUSIVE in outcomes or not outcomes:
        return VerdictKind.INCONCLUSIVE
    return VerdictKind.REPRODUCED


def _judge_backend(original: RunUnderTest, rerun: RunUnderTest, workload: str, backend: str,
                   policy: Reproduction, seed: int) -> BackendResult | None:
    pair = paired_passes(original.table, rerun.table, workload, backend)
    if pair is None:
        return None
    margins = policy.margins_of(backend)
    latency = [judge_latency(pair, metric, margins.band(metric), seed) for metric in METRICS]
    answers = judge_probabilities(pair, margins.max_probability_delta, margins.decision_flips)
    return BackendResult(workload, backend, latency, answers)


def judge(original: RunUnderTest, rerun: RunUnderTest, *, original_pubkey: Path, seed: int = DEFAULT_SEED,
          policy: tuple[Reproduction, MarginSource] | None = None) -> ReproductionVerdict:
    """The verdict on two verified runs (`opened_runs`)."""
    reproduction, source = policy or margins_of(original, original_pubkey)
    comparable = comparability(original, rerun, reproduction)
    results = []
    if not comparable.differing:
        theirs = set(rerun.measured())
        for workload, backend in original.measured():
            if (workload, backend) in theirs:
                found = _judge_backend(original, rerun, workload, backend, reproduction, seed)
                results += [found] if found is not None else []
    kind = _overall(comparable, results)
    return ReproductionVerdict(kind, original, rerun, reproduction, source, comparable, results, seed)

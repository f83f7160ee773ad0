"""The pass protocol: a backend's steps of the plan, run in order (`BackendPasses.run_step`).

A backend's steps come from its plan (evidence/plan.py, `Plan.steps_of`): the first inference
after readiness, a warm-up, then each workload's excluded feasibility passes and its measured
passes (with a `load`, each level's passes over that level's connections). `run_step` runs one
of them; nothing here derives a schedule again. A measured pass is claimed from the plan's
budget (`PassBudget`), and the host controls mark each timed pass's boundaries. Sending one
request and recording it is study/sender.py's; a load level's pass is study/load_levels.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..errors import BackendError, RunIncomplete
from ..evidence.plan import PlanStep
from ..evidence.recipe import LoadLevel, Warmup
from ..evidence.rows import Phase, Row
from ..runtime.readiness import first_inference_hint
from .load_levels import LevelConnections, connection_count, merged_connections, run_level_pass
from .sender import ParsedAnswer, PassRunner, ResponseLog, Via, parse_noul_response, queue_time_ms
from .timed_client import TimedClient
from .workload import Request

__all__ = ["BackendPasses", "ParsedAnswer", "PassBudget", "PassMarks", "PassRunner", "ResponseLog", "StepObserver",
           "Via", "first_request", "parse_noul_response", "queue_time_ms"]


class PassBudget:
    """Refuses measured passes beyond what the plan declared (no adding passes after the fact)."""

    def __init__(self, declared: dict[tuple[str, str], int]) -> None:
        self.declared = declared
        self.done: dict[tuple[str, str], int] = {}

    def claim(self, backend: str, workload: str, pass_index: int) -> None:
        key = (backend, workload)
        allowed = self.declared.get(key, 0)
        if pass_index > allowed or pass_index != self.done.get(key, 0) + 1:
            raise RunIncomplete(
                f"Refusing measured pass {pass_index} of {backend}/{workload}: the plan declares "
                f"{allowed} measured pass(es); passes cannot be added or repeated."
            )
        self.done[key] = pass_index



class StepObserver(Protocol):
    """What a study shows while it runs (orchestrator/progress.py's StudyProgress)."""

    def message(self, text: str) -> None: ...

    def pass_started(self, backend: str, workload: str, phase: str, index: int, total: int) -> None: ...

    def request_done(self, row: Row) -> None: ...

    def pass_finished(self) -> None: ...


class PassMarks(Protocol):
    """The host controls' marks around a timed pass (host/session.HostSession)."""

    def begin(self, label: str) -> None: ...

    def end(self, label: str) -> None: ...


def _longest(requests: list[Request]) -> Request:
    # Token counts are only known from responses; the serialised body size orders requests by length.
    return max(requests, key=lambda r: len(r.body))


def first_request(warmup: Warmup, prepared: dict[str, list[Request]]) -> Request:
    """The first inference's request (also the readiness probe of `readiness: first-inference`)."""
    every = prepared[warmup.longest_of] if warmup.longest_of else [r for name in prepared for r in prepared[name]]
    return _longest(every) if warmup.longest_first else every[0]


@dataclass
class BackendPasses:
    """One backend's steps, run in order over its connection (and each load level's connections)."""

    runner: PassRunner
    prepared: dict[str, list[Request]]  # each workload's requests, in the order every pass sends them
    warmup: Warmup  # the protocol's: which request the first inference sends
    model: str | None
    budget: PassBudget
    marks: PassMarks
    progress: StepObserver
    level_clients: list[TimedClient] = field(default_factory=list)  # every load level's, for the connection counts
    _level: tuple[str, str] | None = None
    _connections: LevelConnections | None = None

    @property
    def backend(self) -> str:
        return self.runner.backend

    def run_step(self, step: PlanStep) -> None:
        if step.phase == "first":  # checked: a finite probability, usage and a decision
            req = first_request(self.warmup, self.prepared)
            row = self.runner.request(req, workload=next(iter(self.prepared)), phase="first", pass_index=1, seq=0)
            if not row.ok or row.probability is None or row.decision is None or row.input_tokens is None:
                error = (row.error or "incomplete answer").rstrip(".")
                hint = first_inference_hint(row.status, error, model=self.model or "", endpoint=self.runner.endpoint)
                raise BackendError(f"Backend {self.backend}: the first inference after readiness failed its check "
                                   f"(finite probability, usage, decision): {error}."
                                   f"{' Likely fix: ' + hint + '.' if hint else ''}")
        elif step.phase == "warmup":
            self._warm_up(step)
        else:
            self._timed_pass(step)

    def close(self) -> None:
        """Close the last load level's connections (the main connection is the caller's)."""
        if self._connections is not None:
            self._connections.close()
            self._connections = None

    def connections(self) -> dict[str, object]:
        """servers.json's connections of this backend: every client's, and the requests sent."""
        return dict(merged_connections([self.runner.client, *self.level_clients]), requests=self.runner.requests)

    def timed_failures(self) -> int:
        return sum(1 for r in self.runner.failures if r.phase in ("feasibility", "measured"))

    def _warm_up(self, step: PlanStep) -> None:
        """The warm-up of a workload (the step's, else the first): its pool's longest request, then its first N."""
        warm = step.warmup or self.warmup
        workload = step.workload_name or next(iter(self.prepared))
        requests = self.prepared[workload]
        batch = ([_longest(self.prepared[warm.longest_of or workload])] if warm.longest_first else [])
        for seq, req in enumerate(batch + requests[: warm.requests]):
            row = self.runner.request(req, workload=workload, phase="warmup", pass_index=1, seq=seq)
            if not row.ok:
                raise BackendError(f"Backend {self.backend}: warm-up request {req.id} failed: {row.error}.")

    def _timed_pass(self, step: PlanStep) -> None:
        """A feasibility or measured pass: claimed (measured), marked by the host controls, shown once it runs."""
        workload, index, level = step.workload_name or "", step.pass_index, step.load_level
        requests = self.prepared[workload]
        connections = None if level is None else self._level_connections(workload, level, len(requests))
        phase: Phase = "measured" if step.phase == "measured" else "feasibility"
        if phase == "measured":
            self.budget.claim(self.backend, workload, index)
        label = f"{self.backend}/{workload}/{phase}-{index}"
        self.marks.begin(label)
        self.progress.pass_started(self.backend, workload, phase if level is None else f"{phase} {level.id}",
                                   index, len(requests))
        try:
            if connections is None or level is None:
                for seq, req in enumerate(requests):
                    self.progress.request_done(self.runner.request(req, workload=workload, phase=phase,
                                                                   pass_index=index, seq=seq))
            else:  # its progress is shown once it ends (never drawn while requests are timed)
                for row in run_level_pass(self.runner, connections, level, requests, workload=workload, phase=phase,
                                          index=index):
                    self.progress.request_done(row)
        finally:
            self.progress.pass_finished()
        self.marks.end(label)

    def _level_connections(self, workload: str, level: LoadLevel, requests: int) -> LevelConnections:
        """The level's connections: opened before its first pass, kept for its next ones, closed after its last."""
        if self._level == (workload, level.id) and self._connections is not None:
            return self._connections
        self.close()
        count = connection_count(level, requests)
        self.progress.message(f"{self.backend}/{workload}: load level {level.id} over {count} connection(s)")
        main = self.runner.client  # a load level's connections are limited as the main one is
        connections = LevelConnections(lambda: TimedClient(main.host, main.port, timeout_s=main.timeout_s,
                                                           max_response_bytes=main.max_response_bytes,
                                                           headers=main.headers), count)
        self.level_clients += connections.clients
        self._connections, self._level = connections.__enter__(), (workload, level.id)
        return connections

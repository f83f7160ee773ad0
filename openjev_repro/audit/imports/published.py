"""What a published study says about itself: its date, hardware, arms, hypothesis and gates.

The import records these in import.json (`study`, `published_gates`) so that the report of an
imported run states the published study's facts, not the import's: its own date, the GPU it
ran on, the names and descriptions of its arms, and every gate or acceptance criterion with
the outcome it published. Each published JSON document (their manifest, plan, provenance or
summary) is decoded once into a `StudyDocument`; the facts and gates are read from those.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

from ...evidence.decoding import UNSET, Finite, Int64, Quoted, UnsetType, decode
from ...evidence.records import PublishedGate, PublishedStudy

__all__ = ["StudyDocument", "published_gates", "study_documents", "study_facts"]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TEXT_LIMIT = 600
_HARDWARE = ("hardware_name", "gpu", "gpu_uuid", "compute_capability", "driver", "cuda_toolkit")
# A criterion's measured value under another top-level key (prefill_batching's summary.json
# limits `maximum_probability_or_score_drift` and `request_failures`, and publishes
# `maximum_drift` and `failures`); a key of the criterion's own name is looked up too.
_MEASURED_AS = {"maximum_probability_or_score_drift": ("maximum_drift",), "request_failures": ("failures",)}

# Where a document holds another value than the object a key usually names, the key says nothing.
NotAnObject = str | Int64 | Finite | bool | None | list[Quoted]


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()[:_TEXT_LIMIT]
    return None


class PublishedControls(msgspec.Struct, frozen=True, kw_only=True):
    """plan.json's `fixed_controls`, a summary's `controls`, provenance.json's `hardware`: hardware facts,
    and (controls) the independent variable and acceptance criteria."""

    hardware_name: Quoted | UnsetType = UNSET
    gpu: Quoted | UnsetType = UNSET
    gpu_uuid: Quoted | UnsetType = UNSET
    compute_capability: Quoted | UnsetType = UNSET
    driver: Quoted | UnsetType = UNSET
    cuda_toolkit: Quoted | UnsetType = UNSET
    independent_variable: Quoted = None
    acceptance: dict[str, Quoted] | NotAnObject = None

    def hardware_lines(self) -> list[str]:
        facts = msgspec.to_builtins(self)
        return [f"{key}: {str(facts[key])[:_TEXT_LIMIT]}" for key in _HARDWARE if key in facts and (
            isinstance(facts[key], (str, int)) and not isinstance(facts[key], bool) or isinstance(facts[key], list))]


class Host(msgspec.Struct, frozen=True, kw_only=True):
    driver: Quoted = None


class Parity(msgspec.Struct, frozen=True, kw_only=True):
    """One mode's parity verdict: passed when |dp| stayed within tol."""

    passed: Quoted = msgspec.field(default=None, name="pass")
    max_abs_dp: Quoted = None
    tol: Quoted = None


class StudyDocument(msgspec.Struct, frozen=True, kw_only=True):
    """One published document describing the study: the keys the facts and gates read (their other keys
    left alone), and its top-level `*gate*`/`accepted*` booleans and numbers, gathered by `read` under
    names no key of theirs has."""

    date_utc: Quoted = None
    date: Quoted = None
    hypothesis: Quoted = None
    independent_variable: Quoted = None
    fixed_controls: PublishedControls | NotAnObject = None
    controls: PublishedControls | NotAnObject = None
    hardware: PublishedControls | NotAnObject = None
    host: Host | NotAnObject = None
    acceptance: dict[str, Quoted] | NotAnObject = None
    gates: dict[str, Quoted] | NotAnObject = None
    parity: dict[str, Parity | NotAnObject] | NotAnObject = None
    flags: dict[str, bool] = msgspec.field(default_factory=dict, name="*gate* and accepted* booleans")
    numbers: dict[str, Int64 | Finite] = msgspec.field(default_factory=dict, name="*numbers*")

    @classmethod
    def read(cls, doc: Any, where: str) -> StudyDocument | None:
        """The document as published (None when it is not a JSON object: it says nothing here)."""
        if not isinstance(doc, dict):
            return None
        flags = {k: v for k, v in doc.items() if isinstance(v, bool) and ("gate" in k or k.startswith("accepted"))}
        numbers = {k: v for k, v in doc.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        return decode({**doc, "*gate* and accepted* booleans": flags, "*numbers*": numbers}, cls, where)

    def published_date(self) -> str | None:
        return next((d for d in (self.date_utc, self.date) if isinstance(d, str) and _DATE.match(d)), None)

    def variable(self) -> str | None:
        """The independent variable it names (at the top, else under controls)."""
        controls = self.controls.independent_variable if isinstance(self.controls, PublishedControls) else None
        return _text(self.independent_variable) or _text(controls)

    def hardware_lines(self) -> list[str]:
        """`key: value` of each hardware fact, from fixed_controls, controls, hardware, then host's driver."""
        lines = [line for p in (self.fixed_controls, self.controls, self.hardware) if isinstance(p, PublishedControls)
                 for line in p.hardware_lines()]
        driver = _text(self.host.driver) if isinstance(self.host, Host) else None
        return lines + [f"driver: {driver}"] * bool(driver)

    def gates_declared(self) -> list[PublishedGate]:
        """Gates it publishes: `*gate*`/`accepted*` booleans, a `gates` object, `parity.<mode>.pass`."""
        gates = [PublishedGate(name=k, criterion_text=None, outcome=v) for k, v in self.flags.items()]
        if isinstance(self.gates, dict):
            gates += [PublishedGate(name=k, criterion_text=None, outcome=v) for k, v in self.gates.items()
                      if isinstance(v, bool)]
        for mode, entry in self.parity.items() if isinstance(self.parity, dict) else ():
            if isinstance(entry, Parity) and isinstance(entry.passed, bool):
                gates.append(PublishedGate(name=f"parity {mode}", outcome=entry.passed,
                                           criterion_text=f"max_abs_dp {entry.max_abs_dp} <= tol {entry.tol}"))
        return gates

    def criteria(self) -> dict[str, str]:
        """Its acceptance criteria (top level and under controls), `key: value` each."""
        controls = self.controls.acceptance if isinstance(self.controls, PublishedControls) else None
        return {str(k): f"{k}: {v}"[:_TEXT_LIMIT] for acceptance in (self.acceptance, controls)
                if isinstance(acceptance, dict) for k, v in acceptance.items()
                if isinstance(v, str | int | float) and not isinstance(v, bool)}


def study_documents(*docs: Any, where: str = "a published study document") -> list[StudyDocument]:
    """The documents that are JSON objects, each decoded once."""
    return [d for d in (StudyDocument.read(doc, where) for doc in docs) if d is not None]


def _first(values: Iterable[str | None]) -> str | None:
    return next((v for v in values if v), None)


def study_facts(docs: list[StudyDocument], *, arms: list[str], descriptions: dict[str, str] | None = None,
                date: str | None = None) -> PublishedStudy:
    """The published study's own facts (its date, else `date`), the first document that states each."""
    hardware = [line for doc in docs for line in doc.hardware_lines()]
    return PublishedStudy(date=_first(doc.published_date() for doc in docs) or date,
                          hardware=tuple(dict.fromkeys(hardware)),
                          arms={a: (descriptions or {}).get(a, "") for a in arms},
                          hypothesis=_first(_text(doc.hypothesis) for doc in docs),
                          independent_variable=_first(doc.variable() for doc in docs))


def published_gates(docs: list[StudyDocument]) -> list[PublishedGate]:
    """Every gate or acceptance criterion with its published outcome (True, False or None: not published).
    A criterion goes to the first gate still without one whose name contains, or is contained in, its
    own; a criterion no gate reports on stands alone, with the value they published, if any (a number
    under its own name or the name they publish it as, from the first document that has one)."""
    gates: list[PublishedGate] = []
    criteria: dict[str, str] = {}
    numbers: dict[str, int | float] = {}
    for doc in docs:
        gates += doc.gates_declared()
        criteria |= doc.criteria()
        numbers = doc.numbers | numbers  # the first document's value wins
    named = {g.name for g in gates}
    for name, criterion in criteria.items():
        at = next((i for i, g in enumerate(gates) if g.criterion_text is None and _related(name, g.name)), None)
        if at is not None:
            gates[at] = msgspec.structs.replace(gates[at], criterion_text=criterion)
        elif name not in named:
            gates.append(_criterion_gate(name, criterion, numbers))
    return gates


def _related(criterion: str, gate: str) -> bool:
    return criterion in gate or gate in criterion


def _criterion_gate(name: str, criterion: str, numbers: dict[str, int | float]) -> PublishedGate:
    """A criterion no gate reports on: no published outcome, and the value they published, if any."""
    value = next((f"{key}: {numbers[key]}" for key in (name, *_MEASURED_AS.get(name, ())) if key in numbers), None)
    text = f"{criterion}; published value {value}" if value else criterion
    return PublishedGate(name=name, criterion_text=text[:_TEXT_LIMIT], outcome=None)

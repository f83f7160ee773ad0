"""JevBench request files: reading tasks, selecting a workload, building HTTP bodies.

A request file is JSONL in JevBench's task format, one task per line with the fields
`id, family, question{type, instructions, criteria}, state, labels, expected, split,
group, provenance, topic` (only id, question, state and expected are required here).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from ..evidence.files import read_jsonl

__all__ = ["QUESTION_ID", "Request", "Task", "build_requests", "load_tasks", "select"]

QUESTION_ID = "q"  # never shown to the model, so any fixed id will do


@dataclass(frozen=True)
class Task:
    id: str
    question: dict[str, Any]
    state: Any
    expected: str | None
    raw: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.question.get("type"))


@dataclass(frozen=True)
class Request:
    """A prepared request: its body is serialised once, before any clock starts."""

    id: str
    body: bytes
    label: str | None


def load_tasks(path: Path) -> list[Task]:
    tasks: list[Task] = []
    for number, raw in read_jsonl(path, "a JevBench task", error=RecipeError, data=Path(path).read_bytes()):
        try:
            tasks.append(Task(id=str(raw["id"]), question=raw["question"], state=raw["state"],
                              expected=raw.get("expected"), raw=raw))
        except (KeyError, TypeError) as exc:
            raise RecipeError(f"{path}:{number}: not a JevBench task ({exc!r}).") from exc
    ids = [t.id for t in tasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise RecipeError(f"{path}: duplicate case ids: {', '.join(dupes[:5])}.")
    return tasks


def select(tasks: list[Task], types: Sequence[str], ids: Sequence[str] | None = None, first: int | None = None,
           repeat: int = 1) -> list[Task]:
    """Tasks of the given types in file order (or exactly `ids` in that order), first N, each repeated."""
    chosen = [t for t in tasks if t.type in types]
    if ids is not None:
        chosen = _exactly(chosen, ids)
    if first is not None:
        chosen = chosen[:first]
    if not chosen:
        raise RecipeError("The workload selects no requests.")
    return [t for t in chosen for _ in range(repeat)]


def _exactly(chosen: list[Task], ids: Sequence[str]) -> list[Task]:
    """The tasks of `ids`, in that order; an id not among `chosen` is a RecipeError."""
    by_id = {t.id: t for t in chosen}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise RecipeError(f"Selected case ids not in the request file: {', '.join(missing[:5])}.")
    return [by_id[i] for i in ids]


def build_requests(tasks: list[Task], model: str = "open-jev") -> list[Request]:
    """One Request per task, its HTTP body serialised now so that no serialisation is timed."""
    return [Request(id=t.id, label=t.expected, body=json.dumps(
        {"model": model, "state": t.state, "questions": {QUESTION_ID: t.question}}, ensure_ascii=False,
        separators=(",", ":")).encode("utf-8")) for t in tasks]

"""Opt-in Nsight Systems traces, run apart from the timed passes and kept as evidence.

`plan_traces` picks, per traced backend, the requests at each recipe token length (from the
published per-request token counts) and lists one trace per (backend, length, repeat).
`run_traces` wraps each backend launch in `nsys profile ...` (a command prefix), sends the
warm-up and the traced request, stops the backend and keeps the report. Where nsys is absent
every trace is skipped with the reason written to `traces/skipped.json`, never silently.

skipped.json / traces.json format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from ..errors import RecipeError
from ..evidence.files import write_json_atomic
from ..evidence.recipe import Recipe, Traces

__all__ = ["TRACES_FORMAT_VERSION", "TraceItem", "TraceLauncher", "nsys_prefix", "plan_traces", "run_traces"]

TRACES_FORMAT_VERSION = 1


@dataclass(frozen=True)
class TraceItem:
    backend: str
    tokens: int
    repeat: int  # 1-based
    position: int  # 1-based position of the traced request in the workload's request file
    output: str  # report path without extension, relative to the run directory
    wrap: str | None  # aux process to wrap (the GPU worker), or None for the backend command

    def to_dict(self) -> dict:
        return asdict(self)


class TraceLauncher(Protocol):
    """Provided by the study runner: start one backend with `prefix` before the argv of `wrap`
    (the backend command when None), yield its base URL once ready, stop it on exit."""

    def __call__(self, backend: str, prefix: list[str], wrap: str | None) -> AbstractContextManager[str]: ...


def _position(token_counts: list[int], tokens: int) -> int:
    """The 1-based position of the first request with `tokens` input tokens."""
    if tokens not in token_counts:
        raise RecipeError(f"No request of the workload has {tokens} input tokens; check traces.tokens.")
    return token_counts.index(tokens) + 1


def _backend_traces(recipe: Recipe, traces: Traces, backend: str, token_counts: list[int]) -> list[TraceItem]:
    """One backend's traces: every traced length, `per_length` times, wrapped by the aux when it has it."""
    items: list[TraceItem] = []
    for tokens in traces.tokens:
        position = _position(token_counts, tokens)
        wrap = traces.aux if any(a.name == traces.aux for a in recipe.backend(backend).aux) else None
        items.extend(TraceItem(backend, tokens, repeat, position, f"traces/{backend}-{tokens}tok-{repeat}", wrap)
                     for repeat in range(1, traces.per_length + 1))
    return items


def plan_traces(recipe: Recipe, token_counts: list[int] | None = None) -> list[TraceItem]:
    """Every trace the recipe asks for (none unless traces.enabled), in run order."""
    traces = recipe.traces
    if traces is None or not traces.enabled:
        return []
    if token_counts is None:
        raise RecipeError("Traces pick requests by input token count; pass the counts from traces.token_counts.")
    return [item for backend in traces.backends or [b.name for b in recipe.backends]
            for item in _backend_traces(recipe, traces, backend, token_counts)]


def nsys_prefix(recipe: Recipe, item: TraceItem, run_dir: Path, nsys: str = "nsys") -> list[str]:
    assert recipe.traces is not None
    return [nsys, *recipe.traces.nsys_args, "-o", str(run_dir / item.output), "--force-overwrite=false"]


def run_traces(recipe: Recipe, items: list[TraceItem], run_dir: Path, launch: TraceLauncher,
               send: Callable[[str, int], None], *, nsys: str | None = None) -> dict:
    """Run each trace; send(url, position) posts the request at that position. Returns the record written."""
    out = run_dir / "traces"
    out.mkdir(parents=True, exist_ok=True)
    binary = nsys or shutil.which("nsys")
    if not items:
        return {}
    if binary is None:
        record = {"format_version": TRACES_FORMAT_VERSION, "status": "skipped",
                  "reason": "Nsight Systems (nsys) is not on PATH on this host",
                  "planned": [i.to_dict() for i in items]}
        _write(out / "skipped.json", record)
        return record
    done = []
    for item in items:
        with launch(item.backend, nsys_prefix(recipe, item, run_dir, binary), item.wrap) as url:
            send(url, item.position)
        reports = sorted(p.name for p in out.glob(Path(item.output).name + ".*"))
        done.append(dict(item.to_dict(), reports=reports))
    record = {"format_version": TRACES_FORMAT_VERSION, "status": "done", "nsys": binary, "traces": done}
    _write(out / "traces.json", record)
    return record


def _write(path: Path, data: dict) -> None:
    write_json_atomic(path, data, indent=1, sort_keys=False)

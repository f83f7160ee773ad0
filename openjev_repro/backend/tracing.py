"""The trace control: one inference request traced with the PyTorch profiler, on request (issue 43).

Tracing is off unless the backend was started with `--trace-dir DIR`. Then a POST to an inference
path with the header `X-OpenJev-Trace: NAME` (NAME: lower-case letters, digits, `.`, `_`, `-`, at
most 100) runs that request's inference under `torch.profiler` (CPU ops; on CUDA also the
device's kernels, memory copies and runtime/driver calls through CUPTI) and writes
`DIR/NAME.pt.trace.json.gz`: Kineto's chrome trace with one more top-level key, `openjev`
(`TraceMeta` in evidence/kernel_families.py: the profiler, torch version, device, the request's
token counts and the CUDA Graph cache counters before and after). The response body is the
request's answer as always; the header `X-OpenJev-Trace-File` names the file written.

Refused, before the request takes the model: tracing not allowed (403 `tracing_not_allowed`), a
bad NAME (400) or a file of that NAME already there (409: evidence is never overwritten).

The profiler's own work (recording every CPU op, CUPTI's activity buffers, writing the trace)
slows the traced request; a study sends traced requests only in its trace step, after the timed
passes, and never times them (docs/traces.md).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ReproError

__all__ = ["TRACE_FILE_HEADER", "TRACE_HEADER", "TRACE_SUFFIX", "TraceRefused", "TraceRequest", "Tracing"]

TRACE_HEADER = "X-OpenJev-Trace"
TRACE_FILE_HEADER = "X-OpenJev-Trace-File"
TRACE_SUFFIX = ".pt.trace.json.gz"
TRACE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")


class TraceRefused(Exception):
    """A traced request this server will not run: (status, error type, message)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass(frozen=True)
class TraceRequest:
    """One traced inference: where its trace goes."""

    name: str
    path: Path

    def around(self, model: Any) -> Callable[..., Any]:
        """model.answer, run under the profiler; the trace is written before the answer returns."""

        def traced(state: Any, questions: Any, candidates: Any) -> Any:
            import torch
            from torch.profiler import ProfilerActivity, profile

            on_cuda = str(model.device).startswith("cuda")
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
            before = model.graphs.stats() if model.graphs is not None else None
            with profile(activities=activities) as prof:
                answers = model.answer(state, questions, candidates)
                if on_cuda:
                    torch.cuda.synchronize(model.device)
            meta = {"format_version": 1, "name": self.name, "profiler": "torch.profiler", "torch": torch.__version__,
                    "device": str(model.device), "activities": [a.name for a in activities],
                    "input_tokens": [len(c.ids) for c in candidates], "graphs_before": before,
                    "graphs_after": model.graphs.stats() if model.graphs is not None else None}
            self._write(prof, meta)
            return answers

        return traced

    def _write(self, prof: Any, meta: dict[str, Any]) -> None:
        """Kineto's trace plus `openjev`, gzip'd (no name or time in the gzip header), created exclusively."""
        raw = self.path.with_name(f".{self.name}.json.tmp")
        try:
            prof.export_chrome_trace(str(raw))
            trace = json.loads(raw.read_text(encoding="utf-8"))
            trace["openjev"] = meta
            data = gzip.compress(json.dumps(trace, separators=(",", ":")).encode("utf-8"), mtime=0)
            with open(self.path, "xb") as out:  # never over an existing trace
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        finally:
            with contextlib.suppress(OSError):
                raw.unlink()


@dataclass(frozen=True)
class Tracing:
    """The server's trace control: `directory` None means tracing is not allowed."""

    directory: Path | None = None

    @classmethod
    def allowed_in(cls, directory: Path | None) -> Tracing:
        """Tracing into `directory` (made when absent, its parent must exist), or off for None."""
        if directory is None:
            return cls()
        try:
            directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise ReproError(f"--trace-dir {directory}: cannot make the directory ({exc.strerror or exc}).") from None
        if directory.is_symlink() or not directory.is_dir():
            raise ReproError(f"--trace-dir {directory} is not a directory.")
        return cls(directory.resolve())

    def describe(self) -> dict[str, Any]:
        """/health `tracing`: whether traced requests are accepted and how they are asked for."""
        return {"allowed": self.directory is not None, "profiler": "torch.profiler", "header": TRACE_HEADER}

    def claim(self, name: str) -> TraceRequest:
        """The traced request NAME asks for, or TraceRefused."""
        if self.directory is None:
            raise TraceRefused(403, "tracing_not_allowed", f"this backend was not started with --trace-dir; "
                                                           f"requests with {TRACE_HEADER} are refused.")
        if not TRACE_NAME_RE.fullmatch(name):
            raise TraceRefused(400, "bad_request", f"{TRACE_HEADER} must be 1-100 of a-z, 0-9, '.', '_', '-' "
                                                   "starting with a letter or digit.")
        path = self.directory / f"{name}{TRACE_SUFFIX}"
        if path.exists():
            raise TraceRefused(409, "trace_exists", f"a trace named {name!r} already exists; traces are never "
                                                    "overwritten.")
        return TraceRequest(name, path)

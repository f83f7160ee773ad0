"""Study orchestration: `run_study` takes a resolved plan and calls one function per step.

    plan_study        the recipe resolved once and its plan (exactly what `invoke plan` prints)
    run_study         preflight, the run directory, then the steps in order:
      step_inputs       verify every declared input (inputs.json)
      step_workloads    load and select each workload's requests
      step_plan         plan.json: the plan as planned, plus the run-only facts in their own fields
      step_environment  environment.json
      step_calibration  calibration.json (client overhead on loopback)
      step_backends     host controls (a context manager) around every backend's passes
      step_summary      summary.json
      step_sign         report, fsync, status complete, the manifest (signed last)

Evidence is written as it is produced (see evidence/rundir.py for the layout). Any failure
leaves the run directory marked incomplete with everything written so far, and raises. What
the study shows while it runs is the observer in `StudyOptions.progress` (orchestrator/progress.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendError, RecipeError, ReproError, RunIncomplete
from ..evidence.files import write_json_atomic
from ..evidence.recipe import AuxProcess, Backend, LoadLevel, Recipe, Workload, parse_server_url
from ..evidence.records import BackendsRecord, EnvironmentRecord, HostRecord, backends_of
from ..evidence.rows import Phase, RowWriter, read_rows
from ..evidence.rundir import (
    BACKENDS_FORMAT_VERSION,
    INPUTS_FORMAT_VERSION,
    PROCESSES_FORMAT_VERSION,
    SERVERS_FORMAT_VERSION,
    RunDir,
    Status,
    fsync_tree,
)
from ..host.driver import GpuDriver
from ..host.override import GpuOverride
from ..host.reaper import Reaper
from ..host.session import HostSession
from ..runtime import ExitRecord, LaunchSpec, RunningBackend, get_runtime
from ..runtime.external import ExternalBackend
from ..runtime.readiness import first_inference_hint
from ..study.inputs import checks_table, require_all_ok, verify_inputs
from ..study.load import LevelConnections, connection_count, merged_connections, run_level_pass
from ..study.passes import PassBudget, PassRunner, ResponseLog
from ..study.placeholders import LAUNCH_NAMES, fill
from ..study.plan import REPRO_ROOT
from ..study.resolved import ResolvedRecipe, resolve_recipe
from ..study.timed_client import TimedClient
from ..study.workload import Request, Task, build_requests, load_tasks, select
from .environment_check import EnvironmentCheck
from .preflight import input_fix, port_in_use, preflight
from .progress import ConsoleProgress, StudyProgress

__all__ = [
    "RUN_ONLY_FIELDS",
    "TIMING_BOUNDARY",
    "StudyOptions",
    "StudyPlan",
    "free_port",
    "plan_study",
    "run_study",
]

TIMING_BOUNDARY = (
    "Client monotonic clock (ns) from just before the request's first byte is sent to just after the "
    "response's last byte is received, over one HTTP/1.1 connection per backend kept open for as long as the "
    "server allows (servers.json counts each backend's connections; a TCP connect, first or renewed, happens "
    "before a request's clock starts). "
    "Includes the backend's HTTP handling, tokenization, inference and response encoding. Excludes request "
    "serialisation, response JSON parsing, process start to readiness, the first inference, warm-up and "
    "feasibility passes."
)


@dataclass
class StudyOptions:
    recipe_path: Path
    out_dir: Path = Path("runs")
    runtime: str | None = None  # overrides every backend's runtime (local | docker)
    inputs_root: Path | None = None
    key_path: Path | None = None  # Ed25519 private key; None: unsigned
    allow_busy: bool = False
    gpu_driver: GpuDriver | None = None  # None: NVML or nvidia-smi (tests pass their double, tests/fake_gpus.py)
    gpu_override: GpuOverride | None = None  # run on this GPU instead of the recipe's (recorded as gpu_override)
    progress: StudyProgress = field(default_factory=ConsoleProgress)  # what the study shows while it runs
    allow_environment_drift: bool = False  # measure even when a backend reports another environment (recorded)


# plan.json fields that only the run can know, next to the planned ones (never one of them).
RUN_ONLY_FIELDS = ("case_ids", "gpu_override")


@dataclass(frozen=True)
class StudyPlan:
    """A study resolved before anything runs: the recipe, its inputs lock applied, and its plan.

    `planned` is `resolve_plan`'s result for this recipe and runtime: what `invoke plan --json`
    prints. The run adds what only it can know in RUN_ONLY_FIELDS and never rewrites a planned field.
    """

    study: ResolvedRecipe
    planned: dict[str, Any]

    def record(self, workloads: dict[str, list[Task]], gpu_override: GpuOverride | None) -> dict[str, Any]:
        """plan.json: the planned fields unchanged, then the run-only ones."""
        clash = sorted(set(RUN_ONLY_FIELDS) & set(self.planned))
        if clash:
            raise AssertionError(f"the plan already holds the run-only fields {clash}")
        # The exact request order of every pass, so `verify` can tell a case missing from every pass.
        run_only: dict[str, Any] = {"case_ids": {name: [t.id for t in tasks] for name, tasks in workloads.items()}}
        if gpu_override is not None:
            run_only["gpu_override"] = gpu_override.declared(self.study.recipe.controls.gpu)
        return {**self.planned, **run_only}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP to the study: handled exactly like Ctrl-C."""


@contextlib.contextmanager
def _signals_interrupt():
    """SIGTERM and SIGHUP raise Stopped (a KeyboardInterrupt) in the main thread, like Ctrl-C.

    Only the first signal (SIGINT included) interrupts: once the study is ending, later ones
    (a burst of SIGTERMs, a second Ctrl-C) are ignored, so the terminating path runs to its end
    (backends stopped, run marked incomplete, one error line), and stay ignored afterwards."""
    fired: list[str] = []

    def stop(signum: int, frame: object) -> None:
        if fired:
            return  # already ending: the terminating path is not interrupted again
        fired.append(signal.Signals(signum).name)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signal.Signals(signum).name)

    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            previous[sig] = signal.signal(sig, stop)
    except ValueError:  # not the main thread: signals cannot be handled here
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if fired else handler)  # a late signal must not kill the error path


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ReproError):
        return str(exc)
    if isinstance(exc, Stopped):
        return f"stopped by {exc} (handled like Ctrl-C); every row written so far is kept"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C); every row written so far is kept"
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename and exc.errno not in (errno.ENOSPC, errno.EDQUOT) else ""
        return f"{type(exc).__name__}: {exc.strerror or exc}{where}"
    return f"{type(exc).__name__}: {exc}"


def mark_incomplete(run: RunDir, error: str) -> bool:
    """Record status incomplete with the error; True when state.json says so afterwards.

    Falls back to rewriting state.json in place when the atomic write cannot (a full disk:
    the temporary file needs space, the existing file's blocks do not).
    """
    with contextlib.suppress(OSError, ValueError, ReproError):  # e.g. a full disk: rewrite in place below
        run.update_state(status=Status.INCOMPLETE, error=error)
        return True
    try:
        state = run.state_record().changed(status=Status.INCOMPLETE, error=error[:500])
        data = (json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n").encode()
        with open(run.file("state.json"), "r+b") as fh:
            fh.write(data)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
        return True
    except (OSError, ValueError, ReproError):
        return False  # readers still see a stale "running" run once this process is gone


def _rerender_report(run: RunDir) -> None:
    """A report written before the failure now carries the INCOMPLETE banner (best effort)."""
    if not run.file("report.md").exists() or run.file("manifest.dsse.json").exists():
        return
    try:
        from ..results.report import write_report

        write_report(run.path, plots=False)  # the plots do not change; the banner is in report.md
    except Exception:  # noqa: BLE001 - best effort: a failing report must not hide the study's own error
        with contextlib.suppress(OSError):
            run.file("report.md").unlink()  # no report rather than one that looks complete


def plan_study(opts: StudyOptions) -> StudyPlan:
    """The recipe read once (its inputs lock applied, its inputs root fixed) and its resolved plan."""
    from ..study.plan import resolve_plan

    study = resolve_recipe(opts.recipe_path, inputs_root_override=opts.inputs_root)
    return StudyPlan(study=study, planned=resolve_plan(study, runtime=opts.runtime).to_json())


@dataclass
class StudyRun:
    """What the steps of one study share: the run directory, the plan, the options, what was started."""

    run: RunDir
    plan: StudyPlan
    opts: StudyOptions
    reaper: Reaper | None = None
    workloads: dict[str, list[Task]] = field(default_factory=dict)
    records: list[ExitRecord] = field(default_factory=list)  # every process started, once stopped
    envcheck: EnvironmentCheck | None = None  # made by step_environment, used once each backend is ready

    @property
    def recipe(self) -> Recipe:
        return self.plan.study.recipe

    @property
    def root(self) -> Path:
        return self.plan.study.root

    @property
    def progress(self) -> StudyProgress:
        return self.opts.progress


def run_study(opts: StudyOptions, plan: StudyPlan | None = None) -> RunDir:
    """Run a planned study (`plan_study(opts)` when no plan is given) into a new run directory."""
    plan = plan if plan is not None else plan_study(opts)
    recipe = plan.study.recipe
    # Everything that can fail before any work is checked first: a study that never started leaves no run directory.
    preflight(plan.study, out_dir=opts.out_dir, key_path=opts.key_path, runtime=opts.runtime)
    try:
        run = RunDir.create(opts.out_dir, recipe.study.id)
    except OSError as exc:
        raise RunIncomplete(f"Cannot create a run directory under {opts.out_dir}: {_describe(exc)}.") from None
    with _signals_interrupt(), Reaper() as reaper:
        try:
            if opts.key_path:  # readers take "complete" without a manifest for incomplete (rundir.unsigned_reason)
                run.update_state(signing_requested=True)
            shutil.copyfile(opts.recipe_path, run.file("recipe.yaml"))
            opts.progress.message(f"[bold]Study {recipe.study.id}[/] → run directory {run.path}")
            _execute(StudyRun(run, plan, opts, reaper))
        except BaseException as exc:  # every failure, OSError and MemoryError included, is an incomplete run
            if isinstance(exc, (SystemExit, GeneratorExit)):
                raise
            error = _describe(exc)
            _remove_temporaries(run)  # first: on a full disk their space is what the next writes need
            marked = mark_incomplete(run, error)
            _rerender_report(run)
            what = "is marked incomplete" if marked else "could not be marked incomplete (readers report it stale)"
            if isinstance(exc, KeyboardInterrupt):
                raise RunIncomplete(f"Interrupted: {error}. The run {run.path} {what}; its rows are kept.") from None
            raise RunIncomplete(f"{error} The run {run.path} {what}; everything it wrote is kept.") from None
    return run


def _remove_temporaries(run: RunDir) -> None:
    for path in run.path.rglob(".*.tmp"):
        with contextlib.suppress(OSError):
            path.unlink()


def _step(run: RunDir, name: str) -> _Step:
    return _Step(run, name)


class _Step:
    """Records a step as attempted on entry and finished on a clean exit."""

    def __init__(self, run: RunDir, name: str) -> None:
        self.run, self.name = run, name

    def __enter__(self) -> None:
        self.run.attempt(self.name)

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.run.finish(self.name)


def _execute(ctx: StudyRun) -> None:
    """The steps, in order; each records itself in state.json (attempted, then finished)."""
    with _step(ctx.run, "verify-inputs"):
        step_inputs(ctx)
    step_workloads(ctx)
    with _step(ctx.run, "plan"):
        step_plan(ctx)
    with _step(ctx.run, "environment"):
        step_environment(ctx)
    with _step(ctx.run, "calibration"):
        step_calibration(ctx)
    step_backends(ctx)
    with _step(ctx.run, "summary"):
        step_summary(ctx)
    step_sign(ctx)


def step_inputs(ctx: StudyRun) -> None:
    """Hash every declared input; inputs.json records each; any mismatch stops the study."""
    recipe, root = ctx.recipe, ctx.root
    checks = verify_inputs(recipe, root, console=ctx.progress.console)
    write_json_atomic(ctx.run.file("inputs.json"), {
        "format_version": INPUTS_FORMAT_VERSION, "root": str(root), "files": [c.to_dict() for c in checks]})
    if any(c.status != "ok" for c in checks) and ctx.progress.console is not None:
        ctx.progress.console.print(checks_table(checks, root))
    require_all_ok(checks, root, input_fix(ctx.plan.study, changed=True))
    ctx.progress.message(f"inputs: {len(checks)} files verified by sha256")


def step_workloads(ctx: StudyRun) -> None:
    """Each workload's selected requests, in the order every pass sends them."""
    ctx.workloads = {w.name: select(load_tasks(ctx.root / w.requests), w.selection.types, w.selection.ids,
                                    w.selection.first, w.repeat) for w in ctx.recipe.workloads}


def step_plan(ctx: StudyRun) -> None:
    write_json_atomic(ctx.run.file("plan.json"), ctx.plan.record(ctx.workloads, ctx.opts.gpu_override))


def step_environment(ctx: StudyRun) -> None:
    environment = _environment(ctx.recipe, ctx.opts, ctx.reaper)
    if ctx.opts.gpu_override is not None:
        environment = environment.with_gpu_override(ctx.opts.gpu_override.declared(ctx.recipe.controls.gpu))
    data = environment.to_json()
    write_json_atomic(ctx.run.file("environment.json"), data)
    ctx.envcheck = EnvironmentCheck(ctx.run, ctx.opts.allow_environment_drift, _project(data), data)


def step_calibration(ctx: StudyRun) -> None:
    calibration = _calibrate()
    write_json_atomic(ctx.run.file("calibration.json"), calibration)
    ctx.progress.message(f"client overhead on loopback: p50 {calibration.get('p50_us', '?')} µs, "
                         f"p99 {calibration.get('p99_us', '?')} µs")


def step_backends(ctx: StudyRun) -> None:
    """Host controls held around every backend's passes; then cleanup, leftovers and failed requests checked."""
    run, recipe, opts = ctx.run, ctx.recipe, ctx.opts
    budget = PassBudget({(b.name, w.name): recipe.passes_for(w)[1] for b in recipe.backends for w in recipe.workloads})
    failures = 0
    host = HostSession(recipe.controls, run.path, allow_busy=opts.allow_busy, driver=opts.gpu_driver,
                       gpu_override=opts.gpu_override)
    run.attempt("host-controls")
    with host:  # leaving it writes host.json (memory samples, cleanup checks, the GPU released)
        run.finish("host-controls")
        with RowWriter(run.rows_path) as rows:
            for backend in recipe.backends:
                with _step(run, f"backend:{backend.name}"):
                    failures += _run_backend(ctx, backend, rows, budget, host)
    _check_after_backends(ctx, host.record, failures)


def _check_after_backends(ctx: StudyRun, host_record: HostRecord | None, failures: int) -> None:
    """The GPU left clean, every process gone, no timed request failed; else the study stops here."""
    cleanup = host_record.cleanup if host_record is not None else None
    if cleanup is not None and not cleanup.get("passed"):
        raise BackendError(f"Cleanup checks failed after the study: {cleanup}.")
    leftovers = [r for r in ctx.records if _left_alive(r)]
    if leftovers:
        raise BackendError(f"Processes still alive after stop: {', '.join(r.ident for r in leftovers)}.")
    if failures:
        raise RunIncomplete(f"{failures} request(s) failed; see the rows with an error in {ctx.run.rows_path}.")


def _left_alive(record: ExitRecord) -> bool:
    """A process we started that is still alive after its stop (a `url` server is not ours and stays up)."""
    return record.launched and not record.exited


def _run_backend(ctx: StudyRun, backend: Backend, rows: RowWriter, budget: PassBudget, host: HostSession) -> int:
    """Start one backend (its aux processes first) or reach its `url`, run its passes, stop everything it started."""
    recipe, run, progress = ctx.recipe, ctx.run, ctx.progress
    prepared = {name: build_requests(tasks, backend.model) for name, tasks in ctx.workloads.items()}
    started: list[RunningBackend] = []  # aux processes first, the client-facing command last
    server: dict[str, Any] = _server_record(backend)
    try:
        handle = _start(ctx, backend, host, started)
        health = handle.wait_ready(recipe.protocol.ready_timeout_s, probe=_first_request(recipe, prepared).body)
        server["readiness"] = handle.readiness.to_dict() if handle.readiness else None
        progress.message(f"{backend.name}: ready ({health.get('method', health.get('model', backend.readiness))})")
        write_json_atomic(run.file(f"logs/{backend.name}.health.json"), health)
        _record_backend_identity(run, backend.name, health)
        step_environment_check(ctx, backend, health, host)
        for process in started:  # read once ready: numactl binds, then execs under the same pid
            host.record_binding(process.spec.name, process.pid)
        alive = lambda: all(p.alive() for p in started)  # noqa: E731 - a worker dying kills the backend
        failures = _protocol(ctx, backend, handle, alive, prepared, rows, budget, host, server)
        _record_after_passes(run, backend.name, handle)
        return failures
    finally:
        _stop_all(ctx, started, host)
        _record_server(run, backend.name, server)
        if ctx.envcheck is not None:
            ctx.envcheck.close_cache(backend.name)


def _record_after_passes(run: RunDir, name: str, handle: RunningBackend) -> None:
    """/health once more after the last pass, before the stop: what autotuned kernels chose (FLA's
    Triton configurations, /health `autotune`) is known only after they ran."""
    try:
        health = handle.wait_ready(10.0)
    except BackendError as exc:
        health = {"available": False, "reason": str(exc)}
    write_json_atomic(run.file(f"logs/{name}.health-after.json"), health)
    if isinstance(health.get("autotune"), dict):
        record = backends_of(run)
        record = record.with_entry(name, {**record.entries[name], "autotune_after_passes": health["autotune"]})
        write_json_atomic(run.file("backends.json"), record.to_json())


def _pinned_triton_cache(ctx: StudyRun, backend: Backend) -> dict[str, str]:
    """A pinned Triton cache (FLA's autotuned choices): checked, copied, pointed at by the backend's env."""
    if ctx.envcheck is None:
        return {}
    return ctx.envcheck.triton_cache(backend.name, ctx.recipe.environment_of(backend), ctx.root)


def step_environment_check(ctx: StudyRun, backend: Backend, health: dict, host: HostSession) -> None:
    """Once a backend is ready, before its first inference: what it reports against the recipe's
    environment (a drifted backend measures nothing unless allowed), then the quiet window whose
    power is the backend's idle power."""
    if ctx.envcheck is not None:
        for difference in ctx.envcheck.check(backend.name, ctx.recipe.environment_of(backend), health):
            ctx.progress.message(f"[yellow]environment drift (allowed)[/]: {backend.name}: {difference}")
    host.idle_window(backend.name, ctx.recipe.controls.idle_window_s)


def _start(ctx: StudyRun, backend: Backend, host: HostSession, started: list[RunningBackend]) -> RunningBackend:
    """Launch the backend's aux processes and command (appending each to `started`), or reach its `url`."""
    recipe, progress = ctx.recipe, ctx.progress
    if not backend.launched:
        assert backend.url is not None
        address, port = parse_server_url(backend.url)
        progress.message(f"[bold]{backend.name}[/]: reaching {backend.url} (running already; not launched by the study)")
        started.append(ExternalBackend(_spec_of(ctx.run, backend, address, port), backend.url))
        return started[-1]
    runtime = get_runtime(ctx.opts.runtime or backend.runtime, command_prefix=host.command_prefix(),
                          reaper=ctx.reaper)
    aux_ports: dict[str, int] = {}
    for aux in backend.aux:
        spec = _launch_spec(ctx, backend, aux_ports, host.gpu_uuid, aux=aux)
        aux_ports[aux.name] = spec.port
        progress.message(f"[bold]{backend.name}[/]: starting aux {aux.name} ({runtime.name}) on port {spec.port}")
        started.append(runtime.launch(spec))
        if aux.health is not None:
            started[-1].wait_ready(aux.ready_timeout_s or recipe.protocol.ready_timeout_s)
    spec = _launch_spec(ctx, backend, aux_ports, host.gpu_uuid)
    spec.env.update(_pinned_triton_cache(ctx, backend))
    progress.message(f"[bold]{backend.name}[/]: starting ({runtime.name}) on {spec.host}:{spec.port}")
    started.append(runtime.launch(spec))
    return started[-1]


def _spec_of(run: RunDir, backend: Backend, address: str, port: int) -> LaunchSpec:
    """The LaunchSpec of a `url` backend: where to reach it and how to tell it is ready, nothing to launch."""
    return LaunchSpec(name=backend.name, argv=[], env={}, host=address, port=port, log_path=run.log_path(backend.name),
                      health_path=backend.health, readiness=backend.readiness, endpoint=backend.endpoint,
                      model=backend.model)


def _server_record(backend: Backend) -> dict[str, Any]:
    """servers.json's entry of a backend: launched or reached, readiness, connections (filled as the run goes)."""
    return {"launched": backend.launched, "owned": backend.launched, "url": backend.url,
            "readiness_kind": backend.readiness, "health": backend.health, "endpoint": backend.endpoint,
            "model": backend.model, "readiness": None, "connections": None}


def _record_server(run: RunDir, name: str, record: dict[str, Any]) -> None:
    path = run.file("servers.json")
    data: dict[str, Any] = run.read("servers.json") if path.is_file() else {
        "format_version": SERVERS_FORMAT_VERSION, "backends": {}}
    data["backends"][name] = record
    write_json_atomic(path, data)


def _stop_words(record: ExitRecord) -> str:
    if not record.launched:
        return f"left running at {record.ident} (not started by the study, not ours to stop)"
    state = "stopped by us" if record.intentional else f"exited on its own (status {record.exit_status})"
    return f"{state}; all processes gone: {record.exited}"


def _stop_all(ctx: StudyRun, started: list[RunningBackend], host: HostSession) -> None:
    """Stop the client-facing command first, then its aux processes; record every exit in processes.json."""
    stopped = [process.stop(ctx.recipe.protocol.stop_grace_s) for process in reversed(started)]
    ctx.records.extend(stopped)  # every process is stopped before anything is written (a full disk stops nothing)
    for record in stopped:
        if record.pid is not None:
            host.track_process(record.pid)
    write_json_atomic(ctx.run.file("processes.json"),
                      {"format_version": PROCESSES_FORMAT_VERSION, "processes": [r.to_dict() for r in ctx.records]})
    for record in stopped:
        ctx.progress.message(f"{record.name}: {_stop_words(record)}")


# What each backend said about itself once ready (the reference backend reports all of these;
# another backend's absent keys are recorded as absent).
IDENTITY_KEYS = ("weights_fingerprint", "weights_fingerprint_scope", "merged_weights_fingerprint",
                 "weights_fingerprint_seconds", "weights_bytes", "mode", "device", "dtype", "lora",
                 "implementations", "torch_threads", "torch_interop_threads", "thread_env", "base_model",
                 "cuda_graphs", "compiled", "hardware", "non_embedding_parameters", "prompt_format",
                 "kernels", "packages", "source_sha256")  # the last three: runs from 2026-12 on


def _record_backend_identity(run: RunDir, name: str, health: dict) -> None:
    """backends.json: per backend, its weights fingerprint and thread settings from /health, after ready."""
    path = run.file("backends.json")
    record = backends_of(run) if path.is_file() else BackendsRecord({}, "/health after ready", BACKENDS_FORMAT_VERSION)
    absent = {"available": False, "reason": "not in the backend's /health"}
    record = record.with_entry(name, {key: health.get(key, absent) for key in IDENTITY_KEYS})
    write_json_atomic(path, record.to_json())


def _port_for(name: str, fixed: int | None, host: str) -> int:
    """The recipe's fixed port when it is free (BackendError when taken), else a free one."""
    if fixed is not None and port_in_use(host, fixed):
        raise BackendError(f"Port {fixed} on {host}, fixed for {name}, is already in use by "
                           "another process; stop it or remove the fixed port from the recipe.")
    return fixed or free_port(host)


def _launch_values(ctx: StudyRun, backend: Backend, host: str, port: int, aux_ports: dict[str, int],
                   aux: AuxProcess | None) -> dict[str, str]:
    """The values of the launch placeholders ({python}, {port}, {port.<aux>}, ...) for one process."""
    # In a container the backend runs under the image's interpreter, not ours.
    python = "python3" if (ctx.opts.runtime or backend.runtime) == "docker" else sys.executable
    values = {"python": python, "host": host, "port": str(port), "inputs": str(ctx.root),
              "run": str(ctx.run.path), "backend": backend.name, "repro": str(REPRO_ROOT),
              **{f"port.{aux_name}": str(p) for aux_name, p in aux_ports.items()}}
    if aux is not None:  # an aux process may name its own port as {port.<its name>} too
        values[f"port.{aux.name}"] = str(port)
    return values


def _launch_spec(ctx: StudyRun, backend: Backend, aux_ports: dict[str, int], gpu_uuid: str | None,
                 aux: AuxProcess | None = None) -> LaunchSpec:
    host = "127.0.0.1"
    name = backend.name if aux is None else f"{backend.name}.{aux.name}"
    port = _port_for(name, backend.port if aux is None else aux.port, host)
    values = _launch_values(ctx, backend, host, port, aux_ports, aux)
    where = f"backend {name}"
    command, env_template = (backend.command, backend.env) if aux is None else (aux.command, aux.env)
    argv = [fill(a, values, f"{where} command") for a in command]
    env = {k: fill(v, values, f"{where} env {k}") for k, v in env_template.items()}
    controls = ctx.recipe.controls
    health = backend.health if aux is None else (aux.health or "/health")
    return LaunchSpec(name=name, argv=argv, env=env, host=host, port=port, log_path=ctx.run.log_path(name),
                      health_path=health, image=backend.image, read_only_mounts=(ctx.root,),
                      gpu_uuid=gpu_uuid, numa_node=controls.numa_node,
                      cpus=controls.cpus, **_reach_of(backend, aux, values))


def _reach_of(backend: Backend, aux: AuxProcess | None, values: dict[str, str]) -> dict[str, Any]:
    """The LaunchSpec fields of how the command is reached and started: readiness, endpoint, model, cwd."""
    if aux is not None:  # an aux process answers our /health contract and runs where the study runs
        return {"readiness": "status-ready", "endpoint": backend.endpoint, "model": backend.model}
    workdir = Path(fill(backend.cwd, values, f"backend {backend.name} cwd")) if backend.cwd else None
    return {"readiness": backend.readiness, "endpoint": backend.endpoint, "model": backend.model, "workdir": workdir}


def _protocol(ctx: StudyRun, backend: Backend, handle: RunningBackend, alive, prepared: dict[str, list[Request]],
              rows: RowWriter, budget: PassBudget, host: HostSession, server: dict[str, Any]) -> int:
    """First inference, warm-up, then each workload's feasibility and measured passes; returns failed requests."""
    run, recipe = ctx.run, ctx.recipe
    proto = recipe.protocol
    responses = ResponseLog(run.responses_path(backend.name))
    client = TimedClient(handle.spec.host, handle.spec.port, timeout_s=proto.request_timeout_s)
    runner = PassRunner(backend.name, client, backend.endpoint, rows, responses, alive)
    level_clients: list[TimedClient] = []  # the connections of load levels, counted with the main one
    try:
        if proto.first_inference:
            _first_inference(runner, recipe, prepared, backend)
        for workload in recipe.workloads:
            requests = prepared[workload.name]
            longest_pool = prepared[recipe.protocol.warmup.longest_of or workload.name]
            _warmup(runner, recipe, workload, requests, longest_pool)
            levels = workload.levels()
            if levels is None:
                for phase, index in _pass_plan(recipe, workload, 0):
                    with _claimed_pass(ctx, backend, workload, budget, host, phase, index):
                        _timed_pass(runner, requests, workload.name, phase, index, ctx.progress)
            else:
                level_clients += _load_levels(ctx, backend, workload, levels, runner, requests, budget, host)
    finally:
        client.close()
        responses.close()
        server["connections"] = dict(merged_connections([client, *level_clients]), requests=runner.requests)
    return sum(1 for r in runner.failures if r.phase in ("feasibility", "measured"))


def _pass_plan(recipe: Recipe, workload: Workload, level_number: int) -> list[tuple[Phase, int]]:
    """The (phase, pass index) of one level's passes: its feasibility passes, then its measured
    ones, indexes following the previous levels' (level_number 0 is the first level, or the only one)."""
    feasibility, measured = recipe.passes_per_level(workload)
    return ([("feasibility", level_number * feasibility + i) for i in range(1, feasibility + 1)]
            + [("measured", level_number * measured + i) for i in range(1, measured + 1)])


@contextmanager
def _claimed_pass(ctx: StudyRun, backend: Backend, workload: Workload, budget: PassBudget, host: HostSession,
                  phase: Phase, index: int) -> Iterator[None]:
    """A timed pass: a measured one claimed from the budget; host controls mark its boundaries."""
    if phase == "measured":
        budget.claim(backend.name, workload.name, index)
    label = f"{backend.name}/{workload.name}/{phase}-{index}"
    host.begin(label)
    yield
    host.end(label)


def _load_levels(ctx: StudyRun, backend: Backend, workload: Workload, levels: list[LoadLevel], runner: PassRunner,
                 requests: list[Request], budget: PassBudget, host: HostSession) -> list[TimedClient]:
    """Every load level of a workload, in order, each over its own connections; returns the clients used."""
    proto = ctx.recipe.protocol
    handle_client = runner.client
    used: list[TimedClient] = []
    for number, level in enumerate(levels):
        count = connection_count(level, len(requests))
        ctx.progress.message(f"{backend.name}/{workload.name}: load level {level.id} over {count} connection(s)")
        with LevelConnections(lambda: TimedClient(handle_client.host, handle_client.port,
                                                  timeout_s=proto.request_timeout_s), count) as connections:
            used += connections.clients
            for phase, index in _pass_plan(ctx.recipe, workload, number):
                with _claimed_pass(ctx, backend, workload, budget, host, phase, index):
                    _level_pass(runner, connections, level, requests, workload.name, phase, index, ctx.progress)
    return used


def _level_pass(runner: PassRunner, connections: LevelConnections, level: LoadLevel, requests: list[Request],
                workload: str, phase: Phase, index: int, progress: StudyProgress) -> None:
    """One pass of a load level; its progress is shown once it ends (never drawn while requests are timed)."""
    progress.pass_started(runner.backend, workload, f"{phase} {level.id}", index, len(requests))
    try:
        for row in run_level_pass(runner, connections, level, requests, workload=workload, phase=phase, index=index):
            progress.request_done(row)
    finally:
        progress.pass_finished()


def _longest(requests: list[Request]) -> Request:
    # Token counts are only known from responses; the serialised body size orders requests by length.
    return max(requests, key=lambda r: len(r.body))


def _first_request(recipe: Recipe, prepared: dict[str, list[Request]]) -> Request:
    """The first inference's request (also the readiness probe of `readiness: first-inference`)."""
    warm = recipe.protocol.warmup
    every = prepared[warm.longest_of] if warm.longest_of else [r for name in prepared for r in prepared[name]]
    return _longest(every) if warm.longest_first else every[0]


def _first_inference(runner: PassRunner, recipe: Recipe, prepared: dict[str, list[Request]],
                     backend: Backend) -> None:
    req = _first_request(recipe, prepared)
    row = runner.request(req, workload=recipe.workloads[0].name, phase="first", pass_index=1, seq=0)
    if not row.ok or row.probability is None or row.decision is None or row.input_tokens is None:
        error = row.error or "incomplete answer"
        hint = first_inference_hint(row.status, error, model=backend.model, endpoint=backend.endpoint)
        raise BackendError(f"Backend {runner.backend}: the first inference after readiness failed its check "
                           f"(finite probability, usage, decision): {error}.{' Likely fix: ' + hint + '.' if hint else ''}")


def _warmup(runner: PassRunner, recipe: Recipe, workload: Workload, requests: list[Request],
            longest_pool: list[Request]) -> None:
    warm = recipe.protocol.warmup
    batch = ([_longest(longest_pool)] if warm.longest_first else []) + requests[: warm.requests]
    for seq, req in enumerate(batch):
        row = runner.request(req, workload=workload.name, phase="warmup", pass_index=1, seq=seq)
        if not row.ok:
            raise BackendError(f"Backend {runner.backend}: warm-up request {req.id} failed: {row.error}.")


def _timed_pass(runner: PassRunner, requests: list[Request], workload: str, phase: Phase, index: int,
                progress: StudyProgress) -> None:
    progress.pass_started(runner.backend, workload, phase, index, len(requests))
    try:
        for seq, req in enumerate(requests):
            progress.request_done(runner.request(req, workload=workload, phase=phase, pass_index=index, seq=seq))
    finally:
        progress.pass_finished()


# --- integration points with the other concerns -------------------------------------------


def _environment(recipe: Recipe, opts: StudyOptions, reaper: Reaper | None = None) -> EnvironmentRecord:
    from ..manifest.environment import collect_environment

    # Package versions come from each backend's own interpreter (local runtime only; an image's
    # are recorded by its digest).
    pythons = {}
    for backend in (b for b in recipe.backends if b.launched):  # a url backend's packages are not ours to list
        deferred = LAUNCH_NAMES | {f"port.{a.name}" for a in backend.aux}
        known = {"python": sys.executable, "repro": str(REPRO_ROOT)}  # a peer's venv: {repro}/.cache/peers/...
        argv0 = fill(backend.command[0], known, f"backend {backend.name} command", deferred=deferred)
        if (opts.runtime or backend.runtime) == "local" and Path(argv0).name.startswith("python"):
            pythons[backend.name] = argv0
    return collect_environment(recipe_path=opts.recipe_path, backends_python=pythons,
                               images=_image_digests(recipe, opts, reaper))


def _project(environment: dict) -> dict:
    """The project code this study runs: git commit and dirty flag (as the tree's metadata says) and
    the digest of the package's source files as they are on disk."""
    git, source = environment.get("project_git"), environment.get("project_source")
    git = git if isinstance(git, dict) else {}
    source = source if isinstance(source, dict) else {}
    return {"commit": git.get("commit"), "dirty": git.get("dirty"), "source_sha256": source.get("sha256")}


def _image_digests(recipe: Recipe, opts: StudyOptions, reaper: Reaper | None = None) -> dict[str, dict]:
    """Image id, repo digests, layer diff IDs and every package inside each docker backend's image
    (a missing image fails here)."""
    docker_backends = [b for b in recipe.backends if b.launched and (opts.runtime or b.runtime) == "docker"]
    if not docker_backends:
        return {}
    from ..images.daemon import connect
    from ..images.inspect import describe_image

    client = connect()
    found: dict[str, dict] = {}
    described: dict[str, dict] = {}  # one probe per image, however many backends use it
    for backend in docker_backends:
        if backend.image is None:
            raise RecipeError(f"Backend {backend.name} runs in docker but names no image in the recipe.")
        if backend.image not in described:
            described[backend.image] = describe_image(client, backend.image, reaper)
        found[backend.name] = described[backend.image]
    return found


def _calibrate() -> dict:
    from ..bench.calibration import calibrate_client_overhead

    return dict(calibrate_client_overhead(), timing_boundary=TIMING_BOUNDARY)


def step_summary(ctx: StudyRun) -> None:
    from ..results.energy import GPU_FILE, read_gpu_events
    from ..results.statistics import summarize

    gpu = read_gpu_events(ctx.run.file(GPU_FILE))  # the host session always writes it (a header when GPU-less)
    write_json_atomic(ctx.run.file("summary.json"), summarize(read_rows(ctx.run.rows_path), ctx.recipe, gpu=gpu))


def step_sign(ctx: StudyRun) -> None:
    """Report and plots, fsync of every file, then status complete, then the manifest (signed last).

    A failure before "complete" leaves the run incomplete; a failure of the manifest itself
    turns it back to incomplete (run_study) and re-renders the report with the banner.
    """
    from ..manifest import write_manifest
    from ..results.report import write_report

    run, opts = ctx.run, ctx.opts
    with _step(run, "report"):
        report = write_report(run.path, as_status=Status.COMPLETE.value)
    fsync_tree(run.path)
    run.update_state(status=Status.COMPLETE)
    envelope = write_manifest(run.path, key_path=opts.key_path)
    fsync_tree(run.path)
    opts.progress.message("[green]study complete[/]")
    opts.progress.message(f"report: {report}\nmanifest: {envelope} ({'signed' if opts.key_path else 'UNSIGNED'})")

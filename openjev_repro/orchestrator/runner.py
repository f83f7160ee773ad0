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
import shutil
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..errors import BackendError, EvidenceError, RecipeError, ReproError, RunIncomplete
from ..evidence.decoding import UnsetType, decode
from ..evidence.files import read_json, write_json_atomic
from ..evidence.identity import RuntimeIdentity
from ..evidence.plan import RUN_ONLY_FIELDS, Plan, PlanBackend, PlanGpuOverride, PlanProcess
from ..evidence.recipe import EnvironmentSpec, Recipe, parse_server_url
from ..evidence.records import (
    Autotune,
    BackendFacts,
    BackendsRecord,
    CalibrationRecord,
    EnvironmentRecord,
    HostRecord,
    InputsRecord,
    ProcessesRecord,
    RecordedGpuOverride,
    ServerEntry,
    ServersRecord,
    backends_of,
    servers_of,
)
from ..evidence.rows import RowWriter, read_rows
from ..evidence.rundir import (
    INPUTS_FORMAT_VERSION,
    PROCESSES_FORMAT_VERSION,
    SERVERS_FORMAT_VERSION,
    RunDir,
    Status,
    fsync_tree,
)
from ..hashing import hash_file
from ..host.driver import GpuDriver
from ..host.override import GpuOverride
from ..host.reaper import Reaper
from ..host.session import HostSession
from ..manifest.preregistration import preregister
from ..runtime import ExitRecord, LaunchSpec, RunningBackend, get_runtime
from ..runtime.external import ExternalBackend, headers_from_environment
from ..study import kernel_caches
from ..study.inputs import checks_table, require_all_ok, verify_inputs
from ..study.passes import BackendPasses, PassBudget, PassRunner, ResponseLog, first_request
from ..study.placeholders import LAUNCH_NAMES, fill
from ..study.resolved import ResolvedRecipe, resolve_recipe
from ..study.timed_client import TimedClient
from ..study.traces import TraceTarget, trace_backend, write_trace_families
from ..study.workload import Request, Task, build_requests, load_tasks, select
from .environment_check import EnvironmentCheck
from .preflight import input_fix, port_in_use, preflight
from .progress import ConsoleProgress, StudyProgress

__all__ = [
    "RUN_ONLY_FIELDS",
    "TIMING_BOUNDARY_TEXT",
    "StudyOptions",
    "StudyPlan",
    "free_port",
    "plan_study",
    "read_plan",
    "run_study",
]

TIMING_BOUNDARY_TEXT = (  # calibration.json's sentence (manifest/run_manifest.TIMING_BOUNDARY is the signed dict)
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
    tsa: str | None = None  # RFC 3161 timestamp authority for the pre-registration (issue 38; with key_path)


@dataclass(frozen=True)
class StudyPlan:
    """A study resolved before anything runs: the recipe, its inputs lock applied, and the plan it executes.

    `planned` is what `invoke plan --json` prints (`resolve_plan`), or a plan read back from a
    file (`read_plan`); the runner writes it to plan.json with the run-only fields set
    (`Plan.with_run_facts`) and runs exactly its backends' processes and steps.
    """

    study: ResolvedRecipe
    planned: Plan

    def plan_json(self, workloads: dict[str, list[Task]], gpu_override: GpuOverride | None) -> Plan:
        """plan.json: the planned fields unchanged, then the exact request order of every pass (so
        `verify` can tell a case missing from every pass) and the GPU override."""
        declared = None if gpu_override is None else decode(
            gpu_override.declared(self.study.recipe.controls.gpu), PlanGpuOverride, "the GPU override")
        return self.planned.with_run_facts({name: [t.id for t in tasks] for name, tasks in workloads.items()},
                                           declared)


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
        run.rewrite_state_in_place(run.state_record().changed(status=Status.INCOMPLETE, error=error[:500]))
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
    from ..study.planner import resolve_plan

    study = resolve_recipe(opts.recipe_path, inputs_root_override=opts.inputs_root)
    return StudyPlan(study=study, planned=resolve_plan(study, runtime=opts.runtime))


def read_plan(path: Path) -> StudyPlan:
    """A plan file (`invoke plan --out`), checked against the recipe it names, ready to run as written.

    The recipe must still have the sha256 the plan recorded, and the plan the recipe's backends
    and workloads (their requests, gates and report come from the recipe); what each backend runs
    (argv, env, runtime, readiness) and its steps are the plan's, edits included.
    """
    planned = Plan.from_json(read_json(path), str(path))
    recipe_path = Path(planned.recipe_path)
    if not recipe_path.is_file() or hash_file(recipe_path) != planned.recipe_sha256:
        raise RecipeError(f"{path}: the recipe it names ({recipe_path}) is missing or changed since the plan "
                          "(sha256 differs); make the plan again with `invoke plan`.")
    study = resolve_recipe(recipe_path, inputs_root_override=Path(planned.inputs_root))
    recipe = study.recipe
    mismatch = planned.mismatch([b.name for b in recipe.backends], [w.name for w in recipe.workloads])
    if mismatch:
        raise RecipeError(f"{path}: {mismatch}")
    for backend in planned.backends:  # an edited argv or env holds only what launch fills: refused now, not mid-run
        _Launcher.check_placeholders(backend, f"{path}: backend {backend.name}")
    return StudyPlan(study=study, planned=planned)


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
    preflight(plan.study, plan.planned, out_dir=opts.out_dir, key_path=opts.key_path)
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
    if ctx.opts.key_path:  # issue 38: gates, margins, inputs and case order signed before the first timed request
        preregister(ctx.run, ctx.recipe, ctx.opts.key_path, ctx.opts.tsa, ctx.progress.message)
    step_backends(ctx)
    write_trace_families(ctx.run.path, ctx.recipe, ctx.root)  # kernel-families.json from traces/ (issue 43)
    with _step(ctx.run, "summary"):
        step_summary(ctx)
    step_sign(ctx)


def step_inputs(ctx: StudyRun) -> None:
    """Hash every declared input; inputs.json records each; any mismatch stops the study."""
    recipe, root = ctx.recipe, ctx.root
    checks = verify_inputs(recipe, root, console=ctx.progress.console)
    record = InputsRecord.from_json({"format_version": INPUTS_FORMAT_VERSION, "root": str(root),
                                     "files": [c.to_dict() for c in checks]})
    write_json_atomic(ctx.run.file("inputs.json"), record.to_json())
    if any(c.status != "ok" for c in checks) and ctx.progress.console is not None:
        ctx.progress.console.print(checks_table(checks, root))
    require_all_ok(checks, root, input_fix(ctx.plan.study, changed=True))
    ctx.progress.message(f"inputs: {len(checks)} files verified by sha256")


def step_workloads(ctx: StudyRun) -> None:
    """Each workload's selected requests, in the order every pass sends them."""
    ctx.workloads = {w.name: select(load_tasks(ctx.root / w.requests), w.selection.types, w.selection.ids,
                                    w.selection.first, w.repeat) for w in ctx.recipe.workloads}


def step_plan(ctx: StudyRun) -> None:
    write_json_atomic(ctx.run.file("plan.json"), ctx.plan.plan_json(ctx.workloads, ctx.opts.gpu_override).to_json())


def step_environment(ctx: StudyRun) -> None:
    environment = _environment(ctx)
    if ctx.opts.gpu_override is not None:
        declared = ctx.opts.gpu_override.declared(ctx.recipe.controls.gpu)
        environment = environment.with_gpu_override(decode(declared, RecordedGpuOverride, "gpu override"))
    write_json_atomic(ctx.run.file("environment.json"), environment.to_json())
    ctx.envcheck = EnvironmentCheck(ctx.run, ctx.opts.allow_environment_drift, environment)


def step_calibration(ctx: StudyRun) -> None:
    calibration = _calibrate()
    write_json_atomic(ctx.run.file("calibration.json"), calibration.to_json())
    ctx.progress.message(f"client overhead on loopback: p50 {calibration.p50_us} µs, p99 {calibration.p99_us} µs")


def step_backends(ctx: StudyRun) -> None:
    """Host controls held around every backend's steps; then cleanup, leftovers and failed requests checked."""
    run, opts, planned = ctx.run, ctx.opts, ctx.plan.planned
    budget = PassBudget(planned.pass_budget("measured"))
    failures = 0
    host = HostSession(planned.controls, run.path, allow_busy=opts.allow_busy, driver=opts.gpu_driver,
                       gpu_override=opts.gpu_override)
    run.attempt("host-controls")
    with host:  # leaving it writes host.json (memory samples, cleanup checks, the GPU released)
        run.finish("host-controls")
        with RowWriter(run.rows_path) as rows:
            for backend in planned.backends:
                with _step(run, f"backend:{backend.name}"):
                    failures += _run_backend(ctx, backend, rows, budget, host)
    _check_after_backends(ctx, host.record, failures)


def _check_after_backends(ctx: StudyRun, host_record: HostRecord | None, failures: int) -> None:
    """The GPU left clean, every process gone, no timed request failed; else the study stops here."""
    if host_record is not None and host_record.cleanup is not None and not host_record.cleanup.passed:
        raise BackendError(f"Cleanup checks failed after the study: {host_record.cleanup.to_json()}.")
    leftovers = [r for r in ctx.records if r.launched and not r.exited]  # a `url` server is not ours: it stays up
    if leftovers:
        raise BackendError(f"Processes still alive after stop: {', '.join(r.ident for r in leftovers)}.")
    if failures:
        raise RunIncomplete(f"{failures} request(s) failed; see the rows with an error in {ctx.run.rows_path}.")


def _run_backend(ctx: StudyRun, backend: PlanBackend, rows: RowWriter, budget: PassBudget, host: HostSession) -> int:
    """Start one backend (its aux processes first) or reach its `url`, run its steps of the plan, stop
    everything it started; returns its failed timed requests."""
    run, progress, protocol = ctx.run, ctx.progress, ctx.plan.planned.protocol
    prepared = {name: build_requests(tasks, backend.model) for name, tasks in ctx.workloads.items()}
    started: list[RunningBackend] = []  # aux processes first, the client-facing command last
    readiness = connections = None
    refused = 0
    try:
        handle = _start(ctx, backend, host, started)
        health = handle.wait_ready(protocol.ready_timeout_s, probe=first_request(protocol.warmup, prepared).body)
        readiness = handle.readiness.to_dict() if handle.readiness else None
        ready = _HealthReady.of(health)
        progress.message(f"{backend.name}: ready ({ready.method or ready.model or backend.readiness_kind})")
        write_json_atomic(run.file(f"logs/{backend.name}.health.json"), health)
        _record_backend_identity(run, backend.name, health)
        step_environment_check(ctx, backend, health, host)
        for process in started:  # read once ready: numactl binds, then execs under the same pid
            host.record_binding(process.spec.name, process.pid)
        passes = _backend_passes(ctx, backend, handle, started, prepared, rows, budget, host)
        try:
            for step in ctx.plan.planned.steps_of(backend.name):
                passes.run_step(step)
        finally:
            passes.close()
            passes.runner.responses.close()
            passes.runner.client.close()
            connections, refused = passes.connections(), passes.runner.queue_times_refused
        if refused:
            progress.message(f"[yellow]{backend.name}[/]: {refused} X-Queue-Time-Ms value(s) longer than their "
                             "request or not finite, recorded as absent (servers.json queue_times_refused)")
        _record_after_passes(run, backend.name, handle)
        trace_backend(TraceTarget(run.path, ctx.root, ctx.recipe, backend.name, handle.spec.host, handle.spec.port,
                                  health, prepared), progress.message)  # after the timed passes, never timed
        failures = passes.timed_failures()
    finally:
        _stop_all(ctx, started, host)
        _record_server(run, backend, readiness, connections, refused)
        if ctx.envcheck is not None:
            ctx.envcheck.close_cache(backend.name)
        kernel_caches.close_caches(run, backend.name, ctx.root)
    changed = kernel_caches.refuse_changed(run, backend.name, ctx.opts.allow_environment_drift)
    if ctx.envcheck is not None:  # allowed: in environment_check.json, so the report's drift banner names it
        ctx.envcheck.add_differences(changed)
    for difference in changed:
        progress.message(f"[yellow]environment drift (allowed)[/]: {difference}")
    return failures


def _backend_passes(ctx: StudyRun, backend: PlanBackend, handle: RunningBackend, started: list[RunningBackend],
                    prepared: dict[str, list[Request]], rows: RowWriter, budget: PassBudget,
                    host: HostSession) -> BackendPasses:
    """The pass protocol of one ready backend, over one connection (a load level opens its own)."""
    protocol = ctx.plan.planned.protocol
    client = TimedClient(handle.spec.host, handle.spec.port, timeout_s=protocol.request_timeout_s,
                         max_response_bytes=protocol.max_response_bytes, headers=handle.request_headers())
    alive = lambda: all(p.alive() for p in started)  # noqa: E731 - a worker dying kills the backend
    runner = PassRunner(backend.name, client, backend.endpoint, rows, ResponseLog(ctx.run.responses_path(backend.name)),
                        alive)
    return BackendPasses(runner, prepared, protocol.warmup, backend.model, budget, host, ctx.progress)


class _HealthReady(msgspec.Struct):
    """What the study shows of a ready backend's /health (any other key is the backend's own)."""

    method: str | None = None
    model: str | None = None

    @classmethod
    def of(cls, health: dict) -> _HealthReady:
        """The names a /health gives; none when it gives them in another shape (a foreign server's)."""
        try:
            return decode(health, cls, "/health")
        except EvidenceError:
            return cls()


class _HealthAfterPasses(msgspec.Struct):
    """What /health says after the passes: autotuned kernels' choices and (issue 39) the libraries mapped.
    A key of another shape is an error naming it; an absent one stays absent."""

    autotune: Autotune | None = None
    runtime_identity: RuntimeIdentity | None = None


def _record_after_passes(run: RunDir, name: str, handle: RunningBackend) -> None:
    """/health once more after the last pass, before the stop: what autotuned kernels chose (FLA's
    Triton configurations, /health `autotune`) is known only after they ran."""
    try:
        health = handle.wait_ready(10.0)
    except BackendError as exc:
        health = {"available": False, "reason": str(exc)}
    write_json_atomic(run.file(f"logs/{name}.health-after.json"), health)
    # after the passes /health names what autotuned kernels chose and (issue 39) every library mapped by then
    facts = decode(health, _HealthAfterPasses, f"{name}'s /health after the passes")
    after = {key: value for key, value in (("autotune_after_passes", facts.autotune),
                                           ("runtime_identity", facts.runtime_identity)) if value is not None}
    if after:
        record = backends_of(run)
        entry = msgspec.structs.replace(record.backends[name], **after)
        write_json_atomic(run.file("backends.json"), record.with_entry(name, entry).to_json())


def _declared_environment(backend: PlanBackend) -> EnvironmentSpec:
    """What the plan says the backend must report once ready (the recipe's, unless the plan was edited)."""
    declared = backend.environment
    return EnvironmentSpec() if isinstance(declared, UnsetType) else EnvironmentSpec.model_validate(declared.to_json())


def step_environment_check(ctx: StudyRun, backend: PlanBackend, health: dict, host: HostSession) -> None:
    """Once a backend is ready, before its first inference: what it reports against the plan's declared
    environment (a drifted backend measures nothing unless allowed), then the quiet window whose
    power is the backend's idle power."""
    if ctx.envcheck is not None:
        for difference in ctx.envcheck.check(backend.name, _declared_environment(backend), health):
            ctx.progress.message(f"[yellow]environment drift (allowed)[/]: {backend.name}: {difference}")
    host.idle_window(backend.name, ctx.plan.planned.controls.idle_window_s)


def _start(ctx: StudyRun, backend: PlanBackend, host: HostSession, started: list[RunningBackend]) -> RunningBackend:
    """Launch the backend's aux processes and command (appending each to `started`), or reach its `url`."""
    progress, protocol = ctx.progress, ctx.plan.planned.protocol
    url = backend.server_url
    if url is not None:
        address, port = parse_server_url(url)
        progress.message(f"[bold]{backend.name}[/]: reaching {url} (running already; not launched by the study)")
        started.append(ExternalBackend(_spec_of(ctx.run, backend, address, port), url,
                                       headers_from_environment(backend.name, backend.header_variables)))
        return started[-1]
    runtime = get_runtime(backend.runtime, command_prefix=host.command_prefix(), reaper=ctx.reaper)
    launcher = _Launcher(ctx, backend, host.gpu_uuid)
    for aux in backend.aux:
        spec = launcher.spec(aux)
        progress.message(f"[bold]{backend.name}[/]: starting aux {aux.name} ({runtime.name}) on port {spec.port}")
        started.append(runtime.launch(spec))
        if aux.health is not None:
            started[-1].wait_ready(aux.ready_timeout_s or protocol.ready_timeout_s)
    spec = launcher.spec(backend.command)
    if ctx.envcheck is not None:  # a pinned Triton cache (FLA's autotuned choices): checked, copied, pointed at
        spec.env.update(ctx.envcheck.triton_cache(backend.name, _declared_environment(backend), ctx.root))
    # the recipe's kernel caches (issue 39): fresh or pinned Triton and Inductor caches beside the run
    spec.env.update(kernel_caches.open_caches(ctx.run, ctx.recipe.backend(backend.name), ctx.root, backend.runtime))
    progress.message(f"[bold]{backend.name}[/]: starting ({runtime.name}) on {spec.host}:{spec.port}")
    started.append(runtime.launch(spec))
    return started[-1]


class _Launcher:
    """The launch specs of one backend's processes: the plan's argv and env with only the launch-time
    placeholders filled ({python}, {host}, {port}, {run}, {backend}, {port.<aux>})."""

    host = "127.0.0.1"

    def __init__(self, ctx: StudyRun, backend: PlanBackend, gpu_uuid: str | None) -> None:
        self.ctx, self.backend, self.gpu_uuid = ctx, backend, gpu_uuid
        self.ports: dict[str, int] = {}  # the aux processes started so far

    @staticmethod
    def check_placeholders(backend: PlanBackend, where: str) -> None:
        """RecipeError when a process's argv, env or the cwd names a placeholder launch does not fill."""
        known = dict.fromkeys(["python", "host", "port", "run", "backend", *(f"port.{a.name}" for a in backend.aux)], "")
        for process in (*backend.aux, backend.command):
            for text in (*process.argv, *process.env.values(), backend.workdir or ""):
                fill(text, known, f"{where} {process.name}")

    def values(self, process: PlanProcess, port: int) -> dict[str, str]:
        # In a container the backend runs under the image's interpreter, not ours.
        python = "python3" if self.backend.runtime == "docker" else sys.executable
        values = {"python": python, "host": self.host, "port": str(port), "run": str(self.ctx.run.path),
                  "backend": self.backend.name, **{f"port.{name}": str(p) for name, p in self.ports.items()}}
        if process.name != "command":  # an aux process may name its own port as {port.<its name>} too
            values[f"port.{process.name}"] = str(port)
        return values

    def spec(self, process: PlanProcess) -> LaunchSpec:
        backend, controls = self.backend, self.ctx.plan.planned.controls
        aux = process.name != "command"
        name = f"{backend.name}.{process.name}" if aux else backend.name
        port = _port_for(name, process.fixed_port, self.host)
        values, where = self.values(process, port), f"backend {name}"
        argv = [fill(a, values, f"{where} command") for a in process.argv]
        env = {k: fill(v, values, f"{where} env {k}") for k, v in process.env.items()}
        if aux:
            self.ports[process.name] = port
        workdir = None if aux or backend.workdir is None else Path(fill(backend.workdir, values, f"{where} cwd"))
        return LaunchSpec(name=name, argv=argv, env=env, host=self.host, port=port, log_path=self.ctx.run.log_path(name),
                          health_path=(process.health or "/health") if aux else backend.health_path, image=backend.image,
                          read_only_mounts=(self.ctx.root,), gpu_uuid=self.gpu_uuid, numa_node=controls.numa_node,
                          cpus=controls.cpus, readiness="status-ready" if aux else backend.readiness_kind,
                          endpoint=backend.endpoint, model=backend.model, workdir=workdir)


def _spec_of(run: RunDir, backend: PlanBackend, address: str, port: int) -> LaunchSpec:
    """The LaunchSpec of a `url` backend: where to reach it and how to tell it is ready, nothing to launch."""
    return LaunchSpec(name=backend.name, argv=[], env={}, host=address, port=port, log_path=run.log_path(backend.name),
                      health_path=backend.health_path, readiness=backend.readiness_kind, endpoint=backend.endpoint,
                      model=backend.model)


def _record_server(run: RunDir, backend: PlanBackend, readiness: dict[str, object] | None,
                   connections: dict[str, object] | None, queue_times_refused: int) -> None:
    """servers.json's entry of a backend: launched or reached, readiness, connections."""
    refused = {"queue_times_refused": queue_times_refused} if queue_times_refused else {}
    entry = decode({"launched": backend.is_launched, "owned": backend.is_launched, "url": backend.server_url,
                    "readiness_kind": backend.readiness_kind, "health": backend.health_path,
                    "endpoint": backend.endpoint, "model": backend.model, "readiness": readiness,
                    "connections": connections, **refused}, ServerEntry, f"servers.json's {backend.name}")
    record = servers_of(run) or ServersRecord(format_version=SERVERS_FORMAT_VERSION)
    write_json_atomic(run.file("servers.json"), record.with_entry(backend.name, entry).to_json())


def _stop_words(record: ExitRecord) -> str:
    if not record.launched:
        return f"left running at {record.ident} (not started by the study, not ours to stop)"
    state = "stopped by us" if record.intentional else f"exited on its own (status {record.exit_status})"
    return f"{state}; all processes gone: {record.exited}"


def _stop_all(ctx: StudyRun, started: list[RunningBackend], host: HostSession) -> None:
    """Stop the client-facing command first, then its aux processes; record every exit in processes.json."""
    stopped = [process.stop(ctx.plan.planned.protocol.stop_grace_s) for process in reversed(started)]
    ctx.records.extend(stopped)  # every process is stopped before anything is written (a full disk stops nothing)
    for record in stopped:
        if record.pid is not None:
            host.track_process(record.pid)
    processes = ProcessesRecord.from_json({"format_version": PROCESSES_FORMAT_VERSION,
                                           "processes": [r.to_dict() for r in ctx.records]})
    write_json_atomic(ctx.run.file("processes.json"), processes.to_json())
    for exit_record in stopped:
        ctx.progress.message(f"{exit_record.name}: {_stop_words(exit_record)}")


# What each backend said about itself once ready (the reference backend reports all of these;
# another backend's absent keys are left out).
IDENTITY_KEYS = ("weights_fingerprint", "weights_fingerprint_scope", "merged_weights_fingerprint",
                 "weights_fingerprint_seconds", "weights_bytes", "mode", "device", "dtype", "lora",
                 "implementations", "torch_threads", "torch_interop_threads", "thread_env", "base_model",
                 "cuda_graphs", "compiled", "hardware", "non_embedding_parameters", "prompt_format",
                 "kernels", "packages", "source_sha256",  # these three: runs from 2026-12 on
                 "runtime_identity")  # issue 39: shared objects, versions as loaded, kernel caches, autotune


def _record_backend_identity(run: RunDir, name: str, health: dict) -> None:
    """backends.json: per backend, its weights fingerprint and thread settings from /health, after ready.

    A key /health lacks, or holds in another shape than BackendFacts says, is left out (the whole
    /health is in logs/<backend>.health.json)."""
    path = run.file("backends.json")
    record = backends_of(run) if path.is_file() else BackendsRecord.started()
    write_json_atomic(path, record.with_entry(name, BackendFacts.from_health(health, IDENTITY_KEYS)).to_json())


def _port_for(name: str, fixed: int | None, host: str) -> int:
    """The plan's fixed port when it is free (BackendError when taken), else a free one."""
    if fixed is not None and port_in_use(host, fixed):
        raise BackendError(f"Port {fixed} on {host}, fixed for {name}, is already in use by "
                           "another process; stop it or remove the fixed port from the recipe.")
    return fixed or free_port(host)


# --- integration points with the other concerns -------------------------------------------


def _environment(ctx: StudyRun) -> EnvironmentRecord:
    from ..manifest.environment import collect_environment

    # Package versions come from each backend's own interpreter (local runtime only; an image's
    # are recorded by its digest; a url backend's packages are not ours to list).
    pythons = {}
    for backend in ctx.plan.planned.backends:
        deferred = LAUNCH_NAMES | {f"port.{a.name}" for a in backend.aux}
        argv0 = fill(backend.command.argv[0] if backend.command.argv else "", {"python": sys.executable},
                     f"backend {backend.name} command", deferred=deferred)
        if backend.is_launched and backend.runtime == "local" and Path(argv0).name.startswith("python"):
            pythons[backend.name] = argv0
    return collect_environment(recipe_path=ctx.opts.recipe_path, backends_python=pythons,
                               images=_image_digests(ctx.plan.planned, ctx.reaper))


def _image_digests(planned: Plan, reaper: Reaper | None = None) -> dict[str, dict]:
    """Image id, repo digests, layer diff IDs and every package inside each docker backend's image
    (a missing image fails here)."""
    docker_backends = [b for b in planned.backends if b.is_launched and b.runtime == "docker"]
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


def _calibrate() -> CalibrationRecord:
    from ..bench.calibration import calibrate_client_overhead

    return CalibrationRecord.from_json(dict(calibrate_client_overhead(), timing_boundary=TIMING_BOUNDARY_TEXT))


def step_summary(ctx: StudyRun) -> None:
    from ..results.energy import GPU_FILE, read_gpu_events
    from ..results.statistics import summarize
    from ..results.trace_gates import trace_inputs

    gpu = read_gpu_events(ctx.run.file(GPU_FILE))  # the host session always writes it (a header when GPU-less)
    write_json_atomic(ctx.run.file("summary.json"), summarize(read_rows(ctx.run.rows_path), ctx.recipe, gpu=gpu,
                                                              **trace_inputs(ctx.run.path)).to_json())


def step_sign(ctx: StudyRun) -> None:
    """Report and plots, fsync of every file, then status complete, then the manifest (signed last).

    A failure before "complete" leaves the run incomplete; a failure of the manifest itself
    turns it back to incomplete (run_study) and re-renders the report with the banner.
    """
    from ..manifest import write_manifest
    from ..manifest.attestations import write_gate_attestations
    from ..results.report import write_report

    run, opts = ctx.run, ctx.opts
    with _step(run, "report"):
        report = write_report(run.path, as_status=Status.COMPLETE.value)
    fsync_tree(run.path)
    run.update_state(status=Status.COMPLETE)
    write_gate_attestations(run.path, opts.key_path)  # issue 38: an in-toto Test Result per gate, signed
    envelope = write_manifest(run.path, key_path=opts.key_path)
    fsync_tree(run.path)
    opts.progress.message("[green]study complete[/]")
    opts.progress.message(f"report: {report}\nmanifest: {envelope} ({'signed' if opts.key_path else 'UNSIGNED'})")

"""Study orchestration: `run_study` takes a resolved plan and executes its steps in order.

    plan_study        the recipe resolved once and its plan (exactly what `invoke plan` prints)
    run_study         preflight, the run directory, then `_execute`, which reads as the steps:
      verify-inputs     every declared input hashed (inputs.json)
      (workloads)       each workload's selected requests
      plan              plan.json: the plan as planned, plus the run-only facts in their own fields
      environment       environment.json
      calibration       calibration.json (client overhead on loopback)
      backends          host controls around every backend's steps of the plan (`step_backends`,
                        one `_run_backend` per backend; the passes are study/passes.py's `run_step`)
      summary           summary.json
      report            report, fsync, status complete, the manifest (signed last)

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
from collections.abc import Iterator
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
from ..runtime import ExitRecord, LaunchSpec, RunningBackend, get_runtime
from ..runtime.external import ExternalBackend
from ..study import kernel_caches
from ..study.inputs import checks_table, require_all_ok, verify_inputs
from ..study.passes import BackendPasses, PassBudget, PassRunner, ResponseLog, first_request
from ..study.placeholders import LAUNCH_NAMES, fill
from ..study.resolved import ResolvedRecipe, resolve_recipe
from ..study.timed_client import TimedClient
from ..study.traces import TraceTarget, trace_backend, write_trace_families
from ..study.workload import Task, build_requests, load_tasks, select
from .environment_check import EnvironmentCheck
from .preflight import docker_images, input_fix, port_in_use, preflight
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

TIMING_BOUNDARY_TEXT = (  # calibration.json's sentence (manifest/statement.TIMING_BOUNDARY is the signed dict)
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


@dataclass(frozen=True)
class StudyPlan:
    """A study resolved before anything runs: the recipe, its inputs lock applied, and the plan it executes.

    `planned` is what `invoke plan --json` prints (`resolve_plan`), or a plan read back from a
    file (`read_plan`); the runner writes it to plan.json with the run-only fields set
    (`Plan.with_run_facts`) and runs exactly its backends' processes and steps.
    """

    study: ResolvedRecipe
    planned: Plan


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
    """What a failed study leaves: its temporary files removed, status incomplete with the error, a
    report written before the failure re-rendered with the INCOMPLETE banner; True when state.json
    says incomplete afterwards.

    The temporaries go first: on a full disk their space is what the next writes need. When the
    atomic write of state.json cannot be made (the temporary file needs space, the existing file's
    blocks do not), state.json is rewritten in place.
    """
    for path in run.path.rglob(".*.tmp"):
        with contextlib.suppress(OSError):
            path.unlink()
    marked = False
    with contextlib.suppress(OSError, ValueError, ReproError):  # e.g. a full disk: rewrite in place below
        run.update_state(status=Status.INCOMPLETE, error=error)
        marked = True
    if not marked:
        with contextlib.suppress(OSError, ValueError, ReproError):  # else readers see a stale "running" run
            run.rewrite_state_in_place(run.state_record().changed(status=Status.INCOMPLETE, error=error[:500]))
            marked = True
    if run.file("report.md").exists() and not run.file("manifest.dsse.json").exists():
        try:
            from ..results.report import write_report

            write_report(run.path, plots=False)  # the plots do not change; the banner is in report.md
        except Exception:  # noqa: BLE001 - best effort: a failing report must not hide the study's own error
            with contextlib.suppress(OSError):
                run.file("report.md").unlink()  # no report rather than one that looks complete
    return marked


def plan_study(opts: StudyOptions) -> StudyPlan:
    """The recipe read once (its inputs lock applied, its inputs root fixed) and its resolved plan."""
    from ..study.plan import resolve_plan

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
    envcheck: EnvironmentCheck | None = None  # made by the environment step, used once each backend is ready

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
            marked = mark_incomplete(run, error)
            what = "is marked incomplete" if marked else "could not be marked incomplete (readers report it stale)"
            if isinstance(exc, KeyboardInterrupt):
                raise RunIncomplete(f"Interrupted: {error}. The run {run.path} {what}; its rows are kept.") from None
            raise RunIncomplete(f"{error} The run {run.path} {what}; everything it wrote is kept.") from None
    return run


@contextlib.contextmanager
def _step(run: RunDir, name: str) -> Iterator[None]:
    """Records a step in state.json as attempted on entry and finished on a clean exit."""
    run.attempt(name)
    yield
    run.finish(name)


def _execute(ctx: StudyRun) -> None:
    """The steps, in order; each records itself in state.json (attempted, then finished)."""
    run, recipe, root, progress, opts = ctx.run, ctx.recipe, ctx.root, ctx.progress, ctx.opts
    with _step(run, "verify-inputs"):  # every declared input hashed; any mismatch stops the study
        checks = verify_inputs(recipe, root, console=progress.console)
        write_json_atomic(run.file("inputs.json"), InputsRecord.from_json(
            {"format_version": INPUTS_FORMAT_VERSION, "root": str(root), "files": [c.to_dict() for c in checks]}
        ).to_json())
        if any(c.status != "ok" for c in checks) and progress.console is not None:
            progress.console.print(checks_table(checks, root))
        require_all_ok(checks, root, input_fix(ctx.plan.study))
        progress.message(f"inputs: {len(checks)} files verified by sha256")
    # each workload's selected requests, in the order every pass sends them
    ctx.workloads = {w.name: select(load_tasks(root / w.requests), w.selection.types, w.selection.ids,
                                    w.selection.first, w.repeat) for w in recipe.workloads}
    override = None if opts.gpu_override is None else opts.gpu_override.declared(recipe.controls.gpu)
    with _step(run, "plan"):  # the planned fields unchanged, then the exact request order of every pass (so
        # `verify` can tell a case missing from every pass) and the GPU override
        planned = ctx.plan.planned.with_run_facts(
            {name: [t.id for t in tasks] for name, tasks in ctx.workloads.items()},
            None if override is None else decode(override, PlanGpuOverride, "the GPU override"))
        write_json_atomic(run.file("plan.json"), planned.to_json())
    with _step(run, "environment"):
        environment = _environment(ctx)
        if override is not None:
            environment = environment.with_gpu_override(decode(override, RecordedGpuOverride, "gpu override"))
        write_json_atomic(run.file("environment.json"), environment.to_json())
        ctx.envcheck = EnvironmentCheck(run, opts.allow_environment_drift, environment)
    with _step(run, "calibration"):  # the client's own overhead on loopback
        from ..bench.calibration import calibrate_client_overhead

        calibration = CalibrationRecord.from_json(dict(calibrate_client_overhead(),
                                                       timing_boundary=TIMING_BOUNDARY_TEXT))
        write_json_atomic(run.file("calibration.json"), calibration.to_json())
        progress.message(f"client overhead on loopback: p50 {calibration.p50_us} µs, p99 {calibration.p99_us} µs")
    step_backends(ctx)
    write_trace_families(run.path, recipe, root)  # kernel-families.json from traces/ (issue 43)
    with _step(run, "summary"):
        from ..results.energy import GPU_FILE, read_gpu_events
        from ..results.statistics import summarize
        from ..results.trace_gates import trace_inputs

        gpu = read_gpu_events(run.file(GPU_FILE))  # the host session always writes it (a header when GPU-less)
        summary = summarize(read_rows(run.rows_path), recipe, gpu=gpu, **trace_inputs(run.path))
        write_json_atomic(run.file("summary.json"), summary.to_json())
    # report and plots, fsync of every file, then status complete, then the manifest (signed last): a
    # failure before "complete" leaves the run incomplete; a failure of the manifest turns it back to
    # incomplete (run_study) and re-renders the report with the banner
    from ..manifest import write_manifest
    from ..results.report import write_report

    with _step(run, "report"):
        report = write_report(run.path, as_status=Status.COMPLETE.value)
    fsync_tree(run.path)
    run.update_state(status=Status.COMPLETE)
    envelope = write_manifest(run.path, key_path=opts.key_path)
    fsync_tree(run.path)
    progress.message("[green]study complete[/]")
    progress.message(f"report: {report}\nmanifest: {envelope} ({'signed' if opts.key_path else 'UNSIGNED'})")


def step_backends(ctx: StudyRun) -> None:
    """Host controls held around every backend's steps; then the GPU left clean, every process gone and
    no timed request failed, else the study stops here."""
    run, opts, planned = ctx.run, ctx.opts, ctx.plan.planned
    budget = PassBudget(planned.measured_budget())
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
    cleanup = host.record.cleanup if host.record is not None else None
    if cleanup is not None and not cleanup.passed:
        raise BackendError(f"Cleanup checks failed after the study: {cleanup.to_json()}.")
    leftovers = [r for r in ctx.records if r.launched and not r.exited]  # a `url` server is not ours: it stays up
    if leftovers:
        raise BackendError(f"Processes still alive after stop: {', '.join(r.ident for r in leftovers)}.")
    if failures:
        raise RunIncomplete(f"{failures} request(s) failed; see the rows with an error in {run.rows_path}.")


def _run_backend(ctx: StudyRun, backend: PlanBackend, rows: RowWriter, budget: PassBudget, host: HostSession) -> int:
    """Start one backend (its aux processes first) or reach its `url`, run its steps of the plan, stop
    everything it started; returns its failed timed requests."""
    run, progress, protocol, envcheck = ctx.run, ctx.progress, ctx.plan.planned.protocol, ctx.envcheck
    assert envcheck is not None  # the environment step, before the backends, made it
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
        _record_health(run, backend.name, health)
        # before the first inference: a drifted backend measures nothing unless allowed
        for difference in envcheck.check(backend.name, _declared_environment(backend), health):
            progress.message(f"[yellow]environment drift (allowed)[/]: {backend.name}: {difference}")
        host.idle_window(backend.name, ctx.plan.planned.controls.idle_window_s)  # its power: the idle power
        for process in started:  # read once ready: numactl binds, then execs under the same pid
            host.record_binding(process.spec.name, process.pid)
        # the pass protocol over one connection (a load level opens its own); a worker dying kills the backend
        client = TimedClient(handle.spec.host, handle.spec.port, timeout_s=protocol.request_timeout_s,
                             max_response_bytes=protocol.max_response_bytes)
        runner = PassRunner(backend.name, client, backend.endpoint, rows, ResponseLog(run.responses_path(backend.name)),
                            lambda: all(p.alive() for p in started))
        passes = BackendPasses(runner, prepared, protocol.warmup, backend.model, budget, host, progress)
        try:
            for step in ctx.plan.planned.steps_of(backend.name):
                passes.run_step(step)
        finally:
            passes.close()
            runner.responses.close()
            client.close()
            connections, refused = passes.connections(), runner.queue_times_refused
        if refused:
            progress.message(f"[yellow]{backend.name}[/]: {refused} X-Queue-Time-Ms value(s) longer than their "
                             "request or not finite, recorded as absent (servers.json queue_times_refused)")
        try:
            after = handle.wait_ready(10.0)
        except BackendError as exc:
            after = {"available": False, "reason": str(exc)}
        _record_health(run, backend.name, after, after_passes=True)
        trace_backend(TraceTarget(run.path, ctx.root, ctx.recipe, backend.name, handle.spec.host, handle.spec.port,
                                  health, prepared), progress.message)  # after the timed passes, never timed
        failures = passes.timed_failures()
    finally:
        _stop_all(ctx, started, host)
        _record_server(run, backend, readiness, connections, refused)
        envcheck.close_cache(backend.name)
        kernel_caches.close_caches(run, backend.name)
    changed = kernel_caches.refuse_changed(run, backend.name, ctx.opts.allow_environment_drift)
    envcheck.add_differences(changed)  # allowed: in environment_check.json, so the report's drift banner names it
    for difference in changed:
        progress.message(f"[yellow]environment drift (allowed)[/]: {difference}")
    return failures


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


def _declared_environment(backend: PlanBackend) -> EnvironmentSpec:
    """What the plan says the backend must report once ready (the recipe's, unless the plan was edited)."""
    declared = backend.environment
    return EnvironmentSpec() if isinstance(declared, UnsetType) else EnvironmentSpec.model_validate(declared.to_json())


def _start(ctx: StudyRun, backend: PlanBackend, host: HostSession, started: list[RunningBackend]) -> RunningBackend:
    """Launch the backend's aux processes and command (appending each to `started`), or reach its `url`."""
    progress, protocol = ctx.progress, ctx.plan.planned.protocol
    url = backend.server_url
    if url is not None:
        address, port = parse_server_url(url)
        progress.message(f"[bold]{backend.name}[/]: reaching {url} (running already; not launched by the study)")
        spec = LaunchSpec(name=backend.name, argv=[], env={}, host=address, port=port,  # nothing to launch
                          log_path=ctx.run.log_path(backend.name), health_path=backend.health_path,
                          readiness=backend.readiness_kind, endpoint=backend.endpoint, model=backend.model)
        started.append(ExternalBackend(spec, url))
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
    assert ctx.envcheck is not None  # the environment step, before the backends, made it
    # a pinned Triton cache (FLA's autotuned choices): checked, copied, pointed at
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
        port = process.fixed_port or free_port(self.host)  # the plan's fixed port, when it is free
        if process.fixed_port is not None and port_in_use(self.host, port):
            raise BackendError(f"Port {port} on {self.host}, fixed for {name}, is already in use by "
                               "another process; stop it or remove the fixed port from the recipe.")
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
    for record in stopped:
        if not record.launched:
            words = f"left running at {record.ident} (not started by the study, not ours to stop)"
        else:
            state = "stopped by us" if record.intentional else f"exited on its own (status {record.exit_status})"
            words = f"{state}; all processes gone: {record.exited}"
        ctx.progress.message(f"{record.name}: {words}")


# What each backend said about itself once ready (the reference backend reports all of these;
# another backend's absent keys are left out).
IDENTITY_KEYS = ("weights_fingerprint", "weights_fingerprint_scope", "merged_weights_fingerprint",
                 "weights_fingerprint_seconds", "weights_bytes", "mode", "device", "dtype", "lora",
                 "implementations", "torch_threads", "torch_interop_threads", "thread_env", "base_model",
                 "cuda_graphs", "compiled", "hardware", "non_embedding_parameters", "prompt_format",
                 "kernels", "packages", "source_sha256",  # these three: runs from 2026-12 on
                 "runtime_identity")  # issue 39: shared objects, versions as loaded, kernel caches, autotune


def _record_health(run: RunDir, name: str, health: dict, *, after_passes: bool = False) -> None:
    """The backend's /health in logs/ and its entry in backends.json, once ready and after the passes.

    Once ready (logs/<backend>.health.json): what it said of itself, IDENTITY_KEYS; a key /health lacks,
    or holds in another shape than BackendFacts says, is left out. After the last pass, before the stop
    (logs/<backend>.health-after.json): what autotuned kernels chose (FLA's Triton configurations,
    /health `autotune`) and (issue 39) every library mapped by then, known only once they ran; a key of
    another shape is an error naming it.
    """
    write_json_atomic(run.file(f"logs/{name}.health{'-after' if after_passes else ''}.json"), health)
    path = run.file("backends.json")
    if not after_passes:
        record = backends_of(run) if path.is_file() else BackendsRecord.started()
        write_json_atomic(path, record.with_entry(name, BackendFacts.from_health(health, IDENTITY_KEYS)).to_json())
        return
    facts = decode(health, _HealthAfterPasses, f"{name}'s /health after the passes")
    after = {key: value for key, value in (("autotune_after_passes", facts.autotune),
                                           ("runtime_identity", facts.runtime_identity)) if value is not None}
    if after:
        record = backends_of(run)
        entry = msgspec.structs.replace(record.backends[name], **after)
        write_json_atomic(path, record.with_entry(name, entry).to_json())


# --- integration points with the other concerns -------------------------------------------


def _environment(ctx: StudyRun) -> EnvironmentRecord:
    """environment.json: package versions come from each backend's own interpreter (local runtime only;
    a url backend's packages are not ours to list), and each docker backend's image is described once
    (image id, repo digests, layer diff IDs, every package inside; a missing image fails here)."""
    from ..manifest.environment import collect_environment

    pythons = {}
    for backend in ctx.plan.planned.backends:
        deferred = LAUNCH_NAMES | {f"port.{a.name}" for a in backend.aux}
        argv0 = fill(backend.command.argv[0] if backend.command.argv else "", {"python": sys.executable},
                     f"backend {backend.name} command", deferred=deferred)
        if backend.is_launched and backend.runtime == "local" and Path(argv0).name.startswith("python"):
            pythons[backend.name] = argv0
    images = docker_images(ctx.plan.planned)
    described: dict[str, dict] = {}  # one probe per image, however many backends use it
    if images:
        from ..images.daemon import connect
        from ..images.inspect import describe_image

        client = connect()
        described = {image: describe_image(client, image, ctx.reaper) for image in dict.fromkeys(images.values())}
    return collect_environment(recipe_path=ctx.opts.recipe_path, backends_python=pythons,
                               images={name: described[image] for name, image in images.items()})

"""Study orchestration: verify inputs, start each backend, run the pass protocol, stop, summarise.

Evidence is written as it is produced (see rundir.py for the layout). Any failure leaves the
run directory marked incomplete with everything written so far, and raises.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import BackendError, RecipeError, ReproError, RunIncomplete
from ..evidence.files import write_json_atomic
from ..evidence.recipe import AuxProcess, Backend, Recipe, Workload
from ..evidence.rows import Phase, RowWriter, read_rows
from ..evidence.rundir import (
    BACKENDS_FORMAT_VERSION,
    INPUTS_FORMAT_VERSION,
    PROCESSES_FORMAT_VERSION,
    RunDir,
    fsync_tree,
)
from ..host.driver import GpuDriver
from ..host.override import GpuOverride
from ..host.reaper import Reaper
from ..host.session import HostSession
from ..runtime import ExitRecord, LaunchSpec, RunningBackend, get_runtime
from ..runtime.local import LocalRuntime
from ..study.inputs import checks_table, require_all_ok, verify_inputs
from ..study.passes import PassBudget, PassRunner, ResponseLog
from ..study.placeholders import LAUNCH_NAMES, fill
from ..study.plan import REPRO_ROOT
from ..study.resolved import ResolvedRecipe, resolve_recipe
from ..study.timed_client import TimedClient
from ..study.workload import Request, build_requests, load_tasks, select
from .preflight import port_in_use, preflight

__all__ = [
    "TIMING_BOUNDARY",
    "StudyOptions",
    "free_port",
    "run_study",
]

TIMING_BOUNDARY = (
    "Client monotonic clock (ns) from just before the request's first byte is sent to just after the "
    "response's last byte is received, over one persistent loopback HTTP/1.1 connection per backend. "
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
    console: Console = field(default_factory=lambda: Console(stderr=True))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP to the study: handled exactly like Ctrl-C."""


@contextlib.contextmanager
def _signals_interrupt():
    """SIGTERM and SIGHUP raise Stopped (a KeyboardInterrupt) in the main thread, like Ctrl-C."""
    def stop(signum: int, frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, stop)
    except ValueError:  # not the main thread: signals cannot be handled here
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
        run.update_state(status="incomplete", error=error)
        return True
    try:
        state = dict(run.state(), status="incomplete", error=error[:500])
        data = (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()
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


def run_study(opts: StudyOptions) -> RunDir:
    # Once: the recipe read, its inputs lock applied (hashes left to `invoke prepare`), its inputs root fixed.
    study = resolve_recipe(opts.recipe_path, inputs_root_override=opts.inputs_root)
    recipe = study.recipe
    # Everything that can fail before any work is checked first: a study that never started leaves no run directory.
    preflight(study, out_dir=opts.out_dir, key_path=opts.key_path, runtime=opts.runtime)
    try:
        run = RunDir.create(opts.out_dir, recipe.study.id)
    except OSError as exc:
        raise RunIncomplete(f"Cannot create a run directory under {opts.out_dir}: {_describe(exc)}.") from None
    with _signals_interrupt(), Reaper() as reaper:
        try:
            shutil.copyfile(opts.recipe_path, run.file("recipe.yaml"))
            opts.console.print(f"[bold]Study {recipe.study.id}[/] → run directory {run.path}", soft_wrap=True)
            _execute(run, study, opts, reaper)
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


def _execute(run: RunDir, study: ResolvedRecipe, opts: StudyOptions, reaper: Reaper | None = None) -> None:
    console = opts.console
    recipe, root = study.recipe, study.root
    with _step(run, "verify-inputs"):
        checks = verify_inputs(recipe, root, console=console)
        write_json_atomic(run.file("inputs.json"), {
            "format_version": INPUTS_FORMAT_VERSION, "root": str(root), "files": [c.to_dict() for c in checks]})
        if any(c.status != "ok" for c in checks):
            console.print(checks_table(checks, root))
        from .preflight import input_fix

        require_all_ok(checks, root, input_fix(study))
        console.print(f"inputs: {len(checks)} files verified by sha256")
    workloads = {w.name: select(load_tasks(root / w.requests), w.selection.types, w.selection.ids,
                                w.selection.first, w.repeat) for w in recipe.workloads}
    with _step(run, "plan"):
        plan = _plan(study, opts)
        # The exact request order of every pass, so `verify` can tell a case missing from every pass.
        plan["case_ids"] = {name: [t.id for t in tasks] for name, tasks in workloads.items()}
        if opts.gpu_override is not None:
            plan["gpu_override"] = opts.gpu_override.declared(recipe.controls.gpu)
        write_json_atomic(run.file("plan.json"), plan)
    with _step(run, "environment"):
        environment = _environment(recipe, opts, reaper)
        if opts.gpu_override is not None:
            environment["gpu_override"] = opts.gpu_override.declared(recipe.controls.gpu)
        write_json_atomic(run.file("environment.json"), environment)
    with _step(run, "calibration"):
        calibration = _calibrate()
        write_json_atomic(run.file("calibration.json"), calibration)
        console.print(f"client overhead on loopback: p50 {calibration.get('p50_us', '?')} µs, "
                      f"p99 {calibration.get('p99_us', '?')} µs")
    budget = PassBudget({(b.name, w.name): recipe.passes_for(w)[1] for b in recipe.backends for w in recipe.workloads})
    records: list[ExitRecord] = []
    failures = 0
    host = HostSession(recipe.controls, run.path, allow_busy=opts.allow_busy, driver=opts.gpu_driver,
                       gpu_override=opts.gpu_override)
    with _step(run, "host-controls"):
        host.__enter__()
    try:
        with RowWriter(run.rows_path) as rows:
            for backend in recipe.backends:
                with _step(run, f"backend:{backend.name}"):
                    failures += _run_backend(run, recipe, root, backend, workloads, rows, budget, records, host, opts,
                                             reaper)
    finally:
        host_json = host.close([int(r.ident) for r in records if r.runtime == "local"])
        write_json_atomic(run.file("host.json"), host_json)
    cleanup = host_json.get("cleanup")
    if cleanup is not None and not cleanup.get("passed"):
        raise BackendError(f"Cleanup checks failed after the study: {cleanup}.")
    leftovers = [r for r in records if not r.exited]
    if leftovers:
        raise BackendError(f"Processes still alive after stop: {', '.join(r.ident for r in leftovers)}.")
    if failures:
        raise RunIncomplete(f"{failures} request(s) failed; see the rows with an error in {run.rows_path}.")
    with _step(run, "summary"):
        _summarise(run, recipe)
    _finish_outputs(run, opts)


def _run_backend(run: RunDir, recipe: Recipe, root: Path, backend: Backend, workloads: dict, rows: RowWriter,
                 budget: PassBudget, records: list[ExitRecord], host: HostSession, opts: StudyOptions,
                 reaper: Reaper | None = None) -> int:
    console = opts.console
    runtime = get_runtime(opts.runtime or backend.runtime)
    if isinstance(runtime, LocalRuntime):
        runtime.prefix = host.command_prefix()
    if hasattr(runtime, "reaper"):
        runtime.reaper = reaper
    prepared = {name: build_requests(tasks, backend.model) for name, tasks in workloads.items()}
    started: list[RunningBackend] = []  # aux processes first, the client-facing command last
    aux_ports: dict[str, int] = {}
    try:
        for aux in backend.aux:
            spec = _launch_spec(run, recipe, root, backend, opts, aux_ports, host.gpu_uuid, aux=aux)
            aux_ports[aux.name] = spec.port
            console.print(f"[bold]{backend.name}[/]: starting aux {aux.name} ({runtime.name}) on port {spec.port}")
            started.append(runtime.launch(spec))
            if aux.health is not None:
                started[-1].wait_ready(aux.ready_timeout_s or recipe.protocol.ready_timeout_s)
        spec = _launch_spec(run, recipe, root, backend, opts, aux_ports, host.gpu_uuid)
        console.print(f"[bold]{backend.name}[/]: starting ({runtime.name}) on {spec.host}:{spec.port}")
        handle = runtime.launch(spec)
        started.append(handle)
        health = handle.wait_ready(recipe.protocol.ready_timeout_s)
        console.print(f"{backend.name}: ready ({health.get('method', health.get('model', ''))})")
        write_json_atomic(run.file(f"logs/{backend.name}.health.json"), health)
        _record_backend_identity(run, backend.name, health)
        for process in started:  # read once ready: numactl binds, then execs under the same pid
            host.record_binding(process.spec.name, getattr(getattr(process, "proc", None), "pid", None))
        alive = lambda: all(p.alive() for p in started)  # noqa: E731 - a worker dying kills the backend
        return _protocol(run, recipe, backend, handle, alive, prepared, rows, budget, host, opts)
    finally:
        stopped = [process.stop(recipe.protocol.stop_grace_s) for process in reversed(started)]  # command first
        records.extend(stopped)  # every process is stopped before anything is written (a full disk stops nothing)
        write_json_atomic(run.file("processes.json"),
                          {"format_version": PROCESSES_FORMAT_VERSION, "processes": [r.to_dict() for r in records]})
        for record in stopped:
            state = "stopped by us" if record.intentional else f"exited on its own (status {record.exit_status})"
            console.print(f"{record.name}: {state}; all processes gone: {record.exited}")


# What each backend said about itself once ready (the reference backend reports all of these;
# another backend's absent keys are recorded as absent).
IDENTITY_KEYS = ("weights_fingerprint", "weights_fingerprint_scope", "merged_weights_fingerprint",
                 "weights_fingerprint_seconds", "weights_bytes", "mode", "device", "dtype", "lora",
                 "implementations", "torch_threads", "torch_interop_threads", "thread_env", "base_model",
                 "cuda_graphs", "compiled", "hardware", "non_embedding_parameters")


def _record_backend_identity(run: RunDir, name: str, health: dict) -> None:
    """backends.json: per backend, its weights fingerprint and thread settings from /health, after ready."""
    path = run.file("backends.json")
    data: dict[str, Any] = run.read("backends.json") if path.is_file() else {
        "format_version": BACKENDS_FORMAT_VERSION, "source": "/health after ready", "backends": {}}
    absent = {"available": False, "reason": "not in the backend's /health"}
    data["backends"][name] = {key: health.get(key, absent) for key in IDENTITY_KEYS}
    write_json_atomic(path, data)


def _launch_spec(run: RunDir, recipe: Recipe, root: Path, backend: Backend, opts: StudyOptions,
                 aux_ports: dict[str, int], gpu_uuid: str | None, aux: AuxProcess | None = None) -> LaunchSpec:
    host = "127.0.0.1"
    name = backend.name if aux is None else f"{backend.name}.{aux.name}"
    fixed = backend.port if aux is None else aux.port
    if fixed is not None and port_in_use(host, fixed):
        raise BackendError(f"Port {fixed} on {host}, fixed for {name}, is already in use by "
                           "another process; stop it or remove the fixed port from the recipe.")
    port = fixed or free_port(host)
    # In a container the backend runs under the image's interpreter, not ours.
    python = "python3" if (opts.runtime or backend.runtime) == "docker" else sys.executable
    values = {"python": python, "host": host, "port": str(port), "inputs": str(root),
              "run": str(run.path), "backend": backend.name, "repro": str(REPRO_ROOT),
              **{f"port.{aux_name}": str(p) for aux_name, p in aux_ports.items()}}
    if aux is not None:  # an aux process may name its own port as {port.<its name>} too
        values[f"port.{aux.name}"] = str(port)
    where = f"backend {name}"
    command, env_template = (backend.command, backend.env) if aux is None else (aux.command, aux.env)
    argv = [fill(a, values, f"{where} command") for a in command]
    env = {k: fill(v, values, f"{where} env {k}") for k, v in env_template.items()}
    controls = recipe.controls
    health = backend.health if aux is None else (aux.health or "/health")
    return LaunchSpec(name=name, argv=argv, env=env, host=host, port=port, log_path=run.log_path(name),
                      health_path=health, image=backend.image, read_only_mounts=(root,),
                      gpu_uuid=gpu_uuid, numa_node=controls.numa_node,
                      cpus=controls.cpus)


def _protocol(run: RunDir, recipe: Recipe, backend: Backend, handle: RunningBackend, alive, prepared: dict[str, list[Request]],
              rows: RowWriter, budget: PassBudget, host: HostSession, opts: StudyOptions) -> int:
    proto = recipe.protocol
    responses = ResponseLog(run.responses_path(backend.name))
    client = TimedClient(handle.spec.host, handle.spec.port, timeout_s=proto.request_timeout_s)
    runner = PassRunner(backend.name, client, backend.endpoint, rows, responses, alive)
    try:
        if proto.first_inference:
            _first_inference(runner, recipe, prepared)
        for workload in recipe.workloads:
            requests = prepared[workload.name]
            longest_pool = prepared[recipe.protocol.warmup.longest_of or workload.name]
            _warmup(runner, recipe, workload, requests, longest_pool)
            feasibility, measured = recipe.passes_for(workload)
            plan: list[tuple[Phase, int]] = ([("feasibility", i) for i in range(1, feasibility + 1)]
                                             + [("measured", i) for i in range(1, measured + 1)])
            for phase, index in plan:
                if phase == "measured":
                    budget.claim(backend.name, workload.name, index)
                label = f"{backend.name}/{workload.name}/{phase}-{index}"
                host.begin(label)
                _timed_pass(runner, requests, workload.name, phase, index, opts.console)
                host.end(label)
    finally:
        client.close()
        responses.close()
    return sum(1 for r in runner.failures if r.phase in ("feasibility", "measured"))


def _longest(requests: list[Request]) -> Request:
    # Token counts are only known from responses; the serialised body size orders requests by length.
    return max(requests, key=lambda r: len(r.body))


def _first_inference(runner: PassRunner, recipe: Recipe, prepared: dict[str, list[Request]]) -> None:
    warm = recipe.protocol.warmup
    every = prepared[warm.longest_of] if warm.longest_of else [r for name in prepared for r in prepared[name]]
    req = _longest(every) if warm.longest_first else every[0]
    row = runner.request(req, workload=recipe.workloads[0].name, phase="first", pass_index=1, seq=0)
    if not row.ok or row.probability is None or row.decision is None or row.input_tokens is None:
        raise BackendError(f"Backend {runner.backend}: the first inference after readiness failed its check "
                           f"(finite probability, usage, decision): {row.error or 'incomplete answer'}.")


def _warmup(runner: PassRunner, recipe: Recipe, workload: Workload, requests: list[Request],
            longest_pool: list[Request]) -> None:
    warm = recipe.protocol.warmup
    batch = ([_longest(longest_pool)] if warm.longest_first else []) + requests[: warm.requests]
    for seq, req in enumerate(batch):
        row = runner.request(req, workload=workload.name, phase="warmup", pass_index=1, seq=seq)
        if not row.ok:
            raise BackendError(f"Backend {runner.backend}: warm-up request {req.id} failed: {row.error}.")


def _timed_pass(runner: PassRunner, requests: list[Request], workload: str, phase: Phase, index: int,
                console: Console) -> None:
    columns = _pass_columns(f"{runner.backend} {workload}", f" {phase} {index}", len(requests), console.width)
    # No refresh thread: the bar is redrawn between requests, never while one is being timed.
    with Progress(*columns, console=console, transient=False, auto_refresh=False) as bar:
        task = bar.add_task("pass", total=len(requests), last="       - ms")
        for seq, req in enumerate(requests):
            row = runner.request(req, workload=workload, phase=phase, pass_index=index, seq=seq)
            last = f"{row.latency_ms:8.2f} ms" if row.ok else "[red]     failed[/]"  # the error is in the row
            bar.update(task, advance=1, last=last, refresh=True)


def _pass_columns(head: str, tail: str, total: int, width: int) -> tuple:
    """A pass's progress line that fits `width`: the count, the last latency and the elapsed time
    always show, and so does the label's tail (phase and pass); the bar narrows or goes first, then
    the label's head (backend, workload) is shortened with …."""
    count = len(f"{total}/{total}")
    fixed = count + len("last request 12345.67 ms") + len("elapsed 0:00:00") + 4  # + the gaps between columns
    label = head + tail
    bar = max(0, min(40, width - fixed - len(label) - 2))
    room = width - fixed - (bar + 1 if bar >= 5 else 0) - 1
    if len(label) > room:
        keep = max(room - len(tail) - 1, 1)
        label = (head[:keep] + "…" + tail) if len(tail) < room else label[: max(room - 1, 1)] + "…"
    columns: list = [TextColumn(label.replace("[", "\\["))]
    if bar >= 5:
        columns.append(BarColumn(bar_width=bar))
    return (*columns, MofNCompleteColumn(), TextColumn("last request {task.fields[last]}"), TextColumn("elapsed"),
            TimeElapsedColumn())


# --- integration points with the other concerns -------------------------------------------


def _plan(study: ResolvedRecipe, opts: StudyOptions) -> dict:
    from ..study.plan import resolve_plan

    return resolve_plan(study, runtime=opts.runtime)


def _environment(recipe: Recipe, opts: StudyOptions, reaper: Reaper | None = None) -> dict:
    from ..manifest.environment import collect_environment

    # Package versions come from each backend's own interpreter (local runtime only; an image's
    # are recorded by its digest).
    pythons = {}
    for backend in recipe.backends:
        deferred = LAUNCH_NAMES | {f"port.{a.name}" for a in backend.aux}
        argv0 = fill(backend.command[0], {"python": sys.executable}, f"backend {backend.name} command", deferred=deferred)
        if (opts.runtime or backend.runtime) == "local" and Path(argv0).name.startswith("python"):
            pythons[backend.name] = argv0
    return collect_environment(recipe_path=opts.recipe_path, backends_python=pythons,
                               images=_image_digests(recipe, opts, reaper))


def _image_digests(recipe: Recipe, opts: StudyOptions, reaper: Reaper | None = None) -> dict[str, dict]:
    """Image id, repo digests, layer diff IDs and every package inside each docker backend's image
    (a missing image fails here)."""
    docker_backends = [b for b in recipe.backends if (opts.runtime or b.runtime) == "docker"]
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


def _summarise(run: RunDir, recipe: Recipe) -> None:
    from ..results.statistics import summarize

    write_json_atomic(run.file("summary.json"), summarize(read_rows(run.rows_path), recipe))


def _finish_outputs(run: RunDir, opts: StudyOptions) -> None:
    """Report and plots, fsync of every file, then status complete, then the manifest (signed last).

    A failure before "complete" leaves the run incomplete; a failure of the manifest itself
    turns it back to incomplete (run_study) and re-renders the report with the banner.
    """
    from ..manifest import write_manifest
    from ..results.report import write_report

    with _step(run, "report"):
        report = write_report(run.path, as_status="complete")
    fsync_tree(run.path)
    run.update_state(status="complete")
    envelope = write_manifest(run.path, key_path=opts.key_path)
    fsync_tree(run.path)
    opts.console.print("[green]study complete[/]")
    opts.console.print(f"report: {report}\nmanifest: {envelope} ({'signed' if opts.key_path else 'UNSIGNED'})",
                       soft_wrap=True)  # paths are never folded: they are copied

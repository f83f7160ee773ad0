"""Study orchestration: verify inputs, start each backend, run the pass protocol, stop, summarise.

Evidence is written as it is produced (see evidence.py for the layout). Any failure leaves the
run directory marked incomplete with everything written so far, and raises.
"""

from __future__ import annotations

import re
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .errors import BackendError, RecipeError, ReproError, RunIncomplete
from .evidence import RunDir, write_json_atomic
from .host.session import HostSession
from .inputs import checks_table, require_all_ok, verify_inputs
from .passes import PassBudget, PassRunner, ResponseLog
from .plan import REPRO_ROOT
from .recipe import AuxProcess, Backend, Recipe, Workload, inputs_root, load_recipe
from .rows import RowWriter, read_rows
from .runtime import ExitRecord, LaunchSpec, RunningBackend, get_runtime
from .runtime.local import LocalRuntime
from .timed_client import TimedClient
from .workload import Request, load_tasks, prepare, select

__all__ = ["StudyOptions", "run_study", "substitute", "free_port", "TIMING_BOUNDARY"]

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
    gpu_backend: object | None = None  # a host.GpuBackend; None: NVML or nvidia-smi (tests pass FakeGpus)
    console: Console = field(default_factory=lambda: Console(stderr=True))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


_AUX_PORT = re.compile(r"\{port\.([a-z0-9][a-z0-9_.-]*)\}")


def substitute(template: str, values: dict[str, str], where: str, aux_ports: dict[str, int] | None = None) -> str:
    """Fill {python} {host} {port} {inputs} {run} {backend} {repro} and {port.<aux>} in a recipe string."""
    ports = aux_ports or {}

    def aux_port(match: re.Match) -> str:
        if match.group(1) not in ports:
            raise RecipeError(f"{where}: {match.group(0)} names no earlier aux process of this backend.")
        return str(ports[match.group(1)])

    try:
        return _AUX_PORT.sub(aux_port, template).format_map(values)
    except (KeyError, IndexError, ValueError) as exc:
        raise RecipeError(f"{where}: unknown placeholder in {template!r} ({exc}); "
                          f"known: {', '.join('{' + k + '}' for k in sorted(values))}.") from None


def run_study(opts: StudyOptions) -> RunDir:
    recipe = load_recipe(opts.recipe_path)
    if recipe.preparation is not None:  # hashes left to `invoke prepare` come from its inputs lock
        from .prepare import locked_recipe

        recipe = locked_recipe(recipe, opts.recipe_path)
    root = inputs_root(opts.recipe_path, recipe, opts.inputs_root)
    run = RunDir.create(opts.out_dir, recipe.study.id)
    shutil.copyfile(opts.recipe_path, run.file("recipe.yaml"))
    opts.console.print(f"[bold]Study {recipe.study.id}[/] → run directory {run.path}")
    try:
        _execute(run, recipe, root, opts)
    except KeyboardInterrupt:
        run.update_state(status="incomplete", error="interrupted (Ctrl-C); every row written so far is kept")
        raise RunIncomplete(f"Interrupted. The run {run.path} is marked incomplete; its rows are kept.") from None
    except ReproError as exc:
        run.update_state(status="incomplete", error=str(exc))
        raise RunIncomplete(f"{exc}\nThe run {run.path} is marked incomplete; everything it wrote is kept.") from exc
    return run


def _step(run: RunDir, name: str) -> "_Step":
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


def _execute(run: RunDir, recipe: Recipe, root: Path, opts: StudyOptions) -> None:
    console = opts.console
    with _step(run, "verify-inputs"):
        checks = verify_inputs(recipe, root, console=console)
        write_json_atomic(run.file("inputs.json"), {
            "format_version": 1, "root": str(root), "files": [c.to_dict() for c in checks]})
        if any(c.status != "ok" for c in checks):
            console.print(checks_table(checks, root))
        require_all_ok(checks, root)
        console.print(f"inputs: {len(checks)} files verified by sha256")
    workloads = {w.name: select(load_tasks(root / w.requests), w.selection.types, w.selection.ids,
                                w.selection.first, w.repeat) for w in recipe.workloads}
    with _step(run, "plan"):
        plan = _plan(recipe, opts, root)
        # The exact request order of every pass, so `verify` can tell a case missing from every pass.
        plan["case_ids"] = {name: [t.id for t in tasks] for name, tasks in workloads.items()}
        write_json_atomic(run.file("plan.json"), plan)
    with _step(run, "environment"):
        write_json_atomic(run.file("environment.json"), _environment(recipe, opts))
    with _step(run, "calibration"):
        calibration = _calibrate()
        write_json_atomic(run.file("calibration.json"), calibration)
        console.print(f"client overhead on loopback: p50 {calibration.get('p50_us', '?')} µs, "
                      f"p99 {calibration.get('p99_us', '?')} µs")
    budget = PassBudget({(b.name, w.name): recipe.passes_for(w)[1] for b in recipe.backends for w in recipe.workloads})
    records: list[ExitRecord] = []
    failures = 0
    host = HostSession(recipe.controls, run.path, allow_busy=opts.allow_busy, backend=opts.gpu_backend)
    with _step(run, "host-controls"):
        host.__enter__()
    try:
        with RowWriter(run.rows_path) as rows:
            for backend in recipe.backends:
                with _step(run, f"backend:{backend.name}"):
                    failures += _run_backend(run, recipe, root, backend, workloads, rows, budget, records, host, opts)
    finally:
        host_json = host.close([int(r.ident) for r in records if r.runtime == "local"])
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
    run.update_state(status="complete")
    console.print("[green]study complete[/]")
    _finish_outputs(run, opts)


def _run_backend(run: RunDir, recipe: Recipe, root: Path, backend: Backend, workloads: dict, rows: RowWriter,
                 budget: PassBudget, records: list[ExitRecord], host: HostSession, opts: StudyOptions) -> int:
    console = opts.console
    runtime = get_runtime(opts.runtime or backend.runtime)
    if isinstance(runtime, LocalRuntime):
        runtime.prefix = host.command_prefix()
    prepared = {name: prepare(tasks, backend.model) for name, tasks in workloads.items()}
    started: list[RunningBackend] = []  # aux processes first, the client-facing command last
    aux_ports: dict[str, int] = {}
    try:
        for aux in backend.aux:
            spec = _launch_spec(run, recipe, root, backend, opts, aux_ports, aux=aux)
            aux_ports[aux.name] = spec.port
            console.print(f"[bold]{backend.name}[/]: starting aux {aux.name} ({runtime.name}) on port {spec.port}")
            started.append(runtime.launch(spec))
            if aux.health is not None:
                started[-1].wait_ready(aux.ready_timeout_s or recipe.protocol.ready_timeout_s)
        spec = _launch_spec(run, recipe, root, backend, opts, aux_ports)
        console.print(f"[bold]{backend.name}[/]: starting ({runtime.name}) on {spec.host}:{spec.port}")
        handle = runtime.launch(spec)
        started.append(handle)
        health = handle.wait_ready(recipe.protocol.ready_timeout_s)
        console.print(f"{backend.name}: ready ({health.get('method', health.get('model', ''))})")
        write_json_atomic(run.file(f"logs/{backend.name}.health.json"), health)
        for process in started:  # read once ready: numactl binds, then execs under the same pid
            host.record_binding(process.spec.name, getattr(getattr(process, "proc", None), "pid", None))
        alive = lambda: all(p.alive() for p in started)  # noqa: E731 - a worker dying kills the backend
        return _protocol(run, recipe, backend, handle, alive, prepared, rows, budget, host, opts)
    finally:
        for process in reversed(started):  # stop the command first, then its aux processes
            record = process.stop(recipe.protocol.stop_grace_s)
            records.append(record)
            write_json_atomic(run.file("processes.json"),
                              {"format_version": 1, "processes": [r.to_dict() for r in records]})
            state = "stopped by us" if record.intentional else f"exited on its own (status {record.exit_status})"
            console.print(f"{record.name}: {state}; all processes gone: {record.exited}")


def _launch_spec(run: RunDir, recipe: Recipe, root: Path, backend: Backend, opts: StudyOptions,
                 aux_ports: dict[str, int], aux: AuxProcess | None = None) -> LaunchSpec:
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
              "run": str(run.path), "backend": backend.name, "repro": str(REPRO_ROOT)}
    where = f"backend {name}"
    command, env_template = (backend.command, backend.env) if aux is None else (aux.command, aux.env)
    argv = [substitute(a, values, where, aux_ports) for a in command]
    env = {k: substitute(v, values, where, aux_ports) for k, v in env_template.items()}
    controls = recipe.controls
    health = backend.health if aux is None else (aux.health or "/health")
    return LaunchSpec(name=name, argv=argv, env=env, host=host, port=port, log_path=run.log_path(name),
                      health_path=health, image=backend.image, read_only_mounts=(root,),
                      gpu_uuid=controls.gpu.uuid if controls.gpu else None, numa_node=controls.numa_node,
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
            plan = [("feasibility", i) for i in range(1, feasibility + 1)] + [("measured", i) for i in range(1, measured + 1)]
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


def _timed_pass(runner: PassRunner, requests: list[Request], workload: str, phase: str, index: int,
                console: Console) -> None:
    columns = (TextColumn(f"{runner.backend} {workload} {phase} {index}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[last]}"), TimeElapsedColumn())
    # No refresh thread: the bar is redrawn between requests, never while one is being timed.
    with Progress(*columns, console=console, transient=False, auto_refresh=False) as bar:
        task = bar.add_task("pass", total=len(requests), last="")
        for seq, req in enumerate(requests):
            row = runner.request(req, workload=workload, phase=phase, pass_index=index, seq=seq)
            last = f"{row.latency_ms:8.2f} ms" if row.ok else f"[red]error: {row.error[:40]}[/]"
            bar.update(task, advance=1, last=last, refresh=True)


# --- integration points with the other concerns -------------------------------------------


def _plan(recipe: Recipe, opts: StudyOptions, root: Path) -> dict:
    from .plan import resolve_plan

    return resolve_plan(recipe, opts.recipe_path, inputs_root=root, runtime=opts.runtime)


def _environment(recipe: Recipe, opts: StudyOptions) -> dict:
    from .manifest.environment import collect_environment

    # Package versions come from each backend's own interpreter (local runtime only; an image's
    # are recorded by its digest).
    pythons = {}
    for backend in recipe.backends:
        argv0 = backend.command[0].replace("{python}", sys.executable)
        if (opts.runtime or backend.runtime) == "local" and Path(argv0).name.startswith("python"):
            pythons[backend.name] = argv0
    return collect_environment(recipe_path=opts.recipe_path, backends_python=pythons,
                               images=_image_digests(recipe, opts))


def _image_digests(recipe: Recipe, opts: StudyOptions) -> dict[str, dict]:
    """Image id, repo digests, layer diff IDs and every package inside each docker backend's image
    (a missing image fails here)."""
    docker_backends = [b for b in recipe.backends if (opts.runtime or b.runtime) == "docker"]
    if not docker_backends:
        return {}
    from .images.daemon import connect
    from .images.inspect import describe_image

    client = connect()
    found: dict[str, dict] = {}
    described: dict[str, dict] = {}  # one probe per image, however many backends use it
    for backend in docker_backends:
        if backend.image is None:
            raise RecipeError(f"Backend {backend.name} runs in docker but names no image in the recipe.")
        if backend.image not in described:
            described[backend.image] = describe_image(client, backend.image)
        found[backend.name] = described[backend.image]
    return found


def _calibrate() -> dict:
    from .bench.calibration import calibrate_client_overhead

    return dict(calibrate_client_overhead(), timing_boundary=TIMING_BOUNDARY)


def _summarise(run: RunDir, recipe: Recipe) -> None:
    from .results import summarize

    write_json_atomic(run.file("summary.json"), summarize(read_rows(run.rows_path), recipe))


def _finish_outputs(run: RunDir, opts: StudyOptions) -> None:
    from .manifest import write_manifest
    from .report import write_report

    report = write_report(run.path)
    envelope = write_manifest(run.path, key_path=opts.key_path)
    opts.console.print(f"report: {report}\nmanifest: {envelope} ({'signed' if opts.key_path else 'UNSIGNED'})")

"""Checks a study can make before it starts work: each failure is one short line saying how to fix it.

`run_study` calls `preflight` before it creates the run directory, so a study that could never
have started (unreadable or wrong key, unwritable output folder, missing inputs, unknown runtime,
no docker daemon or image, a fixed port already taken) leaves nothing behind. Hash mismatches of
present inputs are still found and recorded inside the run by the verify-inputs step.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ..errors import DockerError, InputMismatch, RecipeError, ReproError
from ..evidence.plan import Plan
from ..evidence.recipe import Recipe
from ..evidence.rundir import guard_output
from ..study.resolved import ResolvedRecipe

__all__ = [
    "check_docker",
    "check_key",
    "check_out_dir",
    "check_ports",
    "input_fix",
    "missing_inputs",
    "port_in_use",
    "preflight",
]

RUNTIMES = ("local", "docker")


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_key(key_path: Path | None) -> None:
    """The signing key is readable and an unencrypted Ed25519 private key."""
    if key_path is None:
        return
    from ..manifest.keys import load_private_key

    try:
        load_private_key(Path(key_path))
    except ReproError as exc:
        raise ReproError(f"--key: {exc}") from None


def check_out_dir(out_dir: Path) -> None:
    """The folder that will hold the run directory is (or can be created as) a writable directory."""
    out_dir = Path(out_dir)
    probe = out_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ReproError(f"--out {out_dir}: {probe} is not a directory; choose a folder for run directories.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ReproError(f"--out {out_dir}: {probe} is not writable by you; choose another --out or fix its permissions.")
    guard_output(out_dir, directory=True)  # never inside a run: its files are evidence


def input_fix(study: ResolvedRecipe, *, changed: bool = False) -> str:
    """The command that (re)creates a recipe's inputs; `changed`: some are there, with other bytes."""
    recipe, root = study.recipe, study.root
    if recipe.preparation is not None:
        return f"`invoke prepare --recipe {study.path}` fetches and builds them"
    paths = [f.path for f in recipe.inputs.files]
    if "checkpoint/model.json" in paths and all(p.split("/", 1)[0] in ("checkpoint", "requests") for p in paths):
        # the layout `invoke fixture` writes (the demo's inputs)
        relative = Path(os.path.relpath(root))
        shown = root if relative.parts[:1] == ("..",) else relative
        if changed:  # `invoke fixture` writes only into an empty folder
            return f"`rm -r {shown} && invoke fixture --out {shown}` writes them again"
        hint = "`make demo` builds them, or " if shown == Path(".cache/demo") else ""
        return f"{hint}`invoke fixture --out {shown}` writes them"
    return f"restore them under {root}"


def missing_inputs(recipe: Recipe, root: Path) -> list[str]:
    return [f.path for f in recipe.inputs.files if not (root / f.path).is_file()]


def check_inputs_present(study: ResolvedRecipe) -> None:
    missing = missing_inputs(study.recipe, study.root)
    if missing:
        total = len(study.recipe.inputs.files)
        which = f"all {total} inputs are" if len(missing) == total else (
            f"{len(missing)} of {total} inputs ({', '.join(missing[:2])}{' …' if len(missing) > 2 else ''}) are")
        raise InputMismatch(f"{which} missing under {study.root}; {input_fix(study)}.")


def check_schedules(study: ResolvedRecipe) -> None:
    """No open-loop pass whose arrival schedule would last longer than a pass may (study/load_levels.MAX_SCHEDULE_S)."""
    from ..study.load_levels import schedule_problem
    from ..study.workload import load_tasks, select

    for w in study.recipe.workloads:
        levels = w.levels() or []
        if not any(level.kind == "open" for level in levels):
            continue
        count = len(select(load_tasks(study.root / w.requests), w.selection.types, w.selection.ids,
                           w.selection.first, w.repeat))
        problems = [p for level in levels if (p := schedule_problem(level, count)) is not None]
        if problems:
            raise RecipeError(f"Workload {w.name}, " + "; ".join(problems) + ".")


def check_ports(planned: Plan, host: str = "127.0.0.1") -> None:
    for backend in planned.backends:
        fixed = [(backend.name, backend.command.fixed_port)] + [(f"{backend.name}.{a.name}", a.fixed_port)
                                                                 for a in backend.aux]
        for name, port in fixed:
            if port is not None and port_in_use(host, port):
                raise ReproError(f"Port {port}, fixed for {name} in the recipe, is in use; stop what holds it "
                                 f"(`ss -ltnp 'sport = :{port}'`) or remove the fixed port.")


def check_servers(planned: Plan, timeout_s: float = 3.0) -> None:
    """Every `url` backend accepts a TCP connection now (it is a server running already, not one we start)."""
    from ..evidence.recipe import parse_server_url
    from ..runtime.external import headers_from_environment

    for backend in planned.backends:
        url = backend.server_url
        if url is None:
            continue
        headers_from_environment(backend.name, backend.header_variables)  # set, and fit for a header
        host, port = parse_server_url(url)
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as exc:
            raise ReproError(f"Backend {backend.name}: nothing accepts connections at {url} "
                             f"({exc.strerror or exc}); a `url` backend is a server running already: start it "
                             "first, or fix its `url:` in the recipe.") from None


def check_docker(planned: Plan) -> None:
    docker_backends = [b for b in planned.backends if b.is_launched and b.runtime == "docker"]
    if not docker_backends:
        return
    images = []
    for backend in docker_backends:
        if backend.image is None:
            raise RecipeError(f"Backend {backend.name} runs in docker but names no image in the recipe.")
        images.append(backend.image)
    from ..images.daemon import connect, get_image

    client = connect()
    try:
        for image in images:
            get_image(client, image)
    finally:
        client.close()


def preflight(study: ResolvedRecipe, planned: Plan, *, out_dir: Path, key_path: Path | None) -> None:
    """Every check that needs no run directory; raises a ReproError whose message says how to fix it."""
    for backend in planned.backends:
        if backend.runtime not in RUNTIMES:
            raise RecipeError(f"--runtime {backend.runtime!r} is not one of {', '.join(RUNTIMES)} "
                              f"(the runtime of backend {backend.name}).")
    check_key(key_path)
    check_out_dir(out_dir)
    check_inputs_present(study)
    check_schedules(study)
    check_ports(planned)
    check_servers(planned)
    try:
        check_docker(planned)
    except DockerError as exc:
        raise DockerError(f"--runtime docker: {exc}") from None

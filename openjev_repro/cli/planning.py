"""Tasks: `invoke plan` (what a study will do) and `invoke prepare` (fetch, build, lock inputs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from invoke import Exit, task

from . import user_errors
from .output import echo

if TYPE_CHECKING:
    from ..evidence.plan import Plan, PlanStep
    from ..evidence.recipe import Controls, Gate

__all__ = ["plan", "prepare"]


def _preparation_lines(p: Plan) -> list[str]:
    if p.preparation is None:
        return []
    out = [f"preparation (lock {p.preparation.lock}):"]
    for a in p.preparation.actions:
        out.append(f"  {a.kind:<9} {a.name}: {a.detail}" + (f"\n            $ {' '.join(a.argv)}" if a.shows_command else ""))
    return out


def _hash_lines(p: Plan) -> list[str]:
    out = ["hashes to verify:"]
    out += [f"  {h.sha256[:16] + '…' if h.pinned else 'unpinned (lock)':<18} {h.path}" for h in p.hashes]
    out.append("pins: " + ", ".join(f"{k} {v}" for k, v in p.pins.toolchain.items()))
    out += [f"  commit {k} {v}" for k, v in p.pins.commits.items()]
    return out


def _backend_lines(p: Plan) -> list[str]:
    out = [_controls_line(p.controls)]
    for b in p.backends:
        if b.url:
            out.append(f"backend {b.name}: a running server at {b.url} (not launched or owned by the study), "
                       f"readiness {b.readiness}")
            continue
        out.append(f"backend {b.name} ({b.runtime}): start {' -> '.join(b.start_order)}")
        for proc in (*b.aux, b.command):
            env = " ".join(f"{k}={v}" for k, v in proc.env.items())
            out.append(f"  {proc.name}: {env + ' ' if env else ''}{' '.join(proc.argv)}")
    return out


def _load_lines(steps: tuple[PlanStep, ...]) -> list[str]:
    """One line per load level (workloads with a `load`): how it loads the backend, its passes."""
    levels: dict[tuple[str, str], dict[str, Any]] = {}
    passes: dict[tuple[str, str], list[str]] = {}
    for x in steps:
        if isinstance(x.level, str) and isinstance(x.workload, str) and x.load:
            key = (x.workload, x.level)
            spec = levels.setdefault(key, {k: v for k, v in x.load.to_json().items() if k != "id"})
            if x.latency_bound_ms:
                spec["latency_bound_ms"] = x.latency_bound_ms
            passes.setdefault(key, []).append(f"{x.phase}#{x.index}")
    return [f"load level {workload}/{level}: " + ", ".join(f"{k}={v}" for k, v in spec.items())
            + f" ({', '.join(passes[(workload, level)])})" for (workload, level), spec in levels.items()]


def _gate_line(gate: Gate) -> str:
    """A gate's name, kind and every other declared setting (its description aside)."""
    settings = gate.model_dump(mode="json", exclude={"name", "kind", "description"})
    return f"  {gate.name} [{gate.kind}] " + ", ".join(f"{k}={v}" for k, v in settings.items() if v is not None)


def _pass_and_gate_lines(p: Plan) -> list[str]:
    out = []
    for s in p.passes[:1]:
        out.append("passes per backend: " + ", ".join(step.label() for step in s.steps))
        out += _load_lines(s.steps)
    if p.traces.enabled:
        out.append(f"traces: {len(p.traces.items or ())} (opt-in, outside the timed passes; docs/traces.md)")
    return out + ["gates:", *(_gate_line(g) for g in p.gates)]


def _print_plan(p: Plan) -> None:
    out = [f"study {p.study.id} ({p.study.date.isoformat()}): {p.study.purpose}",
           f"recipe {p.recipe_path} sha256 {p.recipe_sha256}",
           f"inputs root {p.inputs_root}" + ("  [needs `invoke prepare`]" if p.needs_preparation else "")]
    if p.images:
        out.append("images: " + ", ".join(p.images))
    out += _preparation_lines(p) + _hash_lines(p) + _backend_lines(p) + _pass_and_gate_lines(p)
    echo("\n".join(out))


def _controls_line(controls: Controls) -> str:
    """What the study pins, in words: never a Python None."""
    parts = []
    if controls.gpu is not None:
        parts.append(f"GPU {controls.gpu.index} {controls.gpu.uuid}")
    if controls.numa_node is not None:
        parts.append(f"NUMA {controls.numa_node}")
    if controls.cpus is not None:
        parts.append(f"CPUs {controls.cpus}")
    return "controls: " + (", ".join(parts) if parts else "none (no GPU, NUMA node or CPU list pinned)")


@task(help={"recipe": "recipe YAML file", "json": "print the plan as JSON",
            "out": "write the plan as JSON to this new file (refused if it exists): `invoke study --plan` runs it",
            "inputs": "inputs root (default: the recipe's inputs.root)", "runtime": "override every backend's runtime"})
@user_errors
def plan(c, recipe, json_=False, inputs=None, runtime=None, out=None):
    """Print the fully resolved plan of a recipe, and validate every pin, without network or GPU."""
    from ..evidence.files import write_json_atomic
    from ..study.planner import resolve_plan
    from ..study.resolved import resolve_recipe

    study = resolve_recipe(Path(recipe), inputs_root_override=Path(inputs) if inputs else None,
                           apply_lock=out is not None)  # a plan to run has the inputs lock applied, as a study's
    resolved = resolve_plan(study, runtime=runtime)
    if out is not None:
        if Path(out).exists():
            raise Exit(f"error: {out} exists; the plan is written to a new file only.", code=1)
        write_json_atomic(Path(out), resolved.to_json())
        print(f"plan written to {out}; run it with `invoke study --plan {out}`")
    elif json_:
        print(json.dumps(resolved.to_json(), indent=1))
    else:
        _print_plan(resolved)


@task(help={"recipe": "recipe YAML file", "inputs": "inputs root (default: the recipe's inputs.root)",
            "dry_run": "print the steps (with what is done already) and change nothing",
            "python": "interpreter for {python} in preparation steps (default: this one)"})
@user_errors
def prepare(c, recipe, inputs=None, dry_run=False, python=None):
    """Download, check out, select requests, run upstream export/build steps, then verify and lock hashes."""
    from ..evidence.recipe import load_recipe
    from ..study.preparation import plan_prepare, run_prepare

    path = Path(recipe)
    loaded = load_recipe(path)
    root = Path(inputs) if inputs else None
    if dry_run:
        for a in plan_prepare(loaded, path, root=root, python=python or sys.executable):
            echo(f"[{'done' if a.done else 'todo'}] {a.kind} {a.name}: {a.detail}")
            if a.argv and a.kind == "command":
                echo(f"       $ {' '.join(a.argv)}")
        return
    run_prepare(loaded, path, root=root, python=python or sys.executable)

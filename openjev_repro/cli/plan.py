"""Tasks: `invoke plan` (what a study will do) and `invoke prepare` (fetch, build, lock inputs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from invoke import task

from . import user_errors

__all__ = ["plan", "prepare"]


def _preparation_lines(p: dict) -> list[str]:
    if not p["preparation"]:
        return []
    out = [f"preparation (lock {p['preparation']['lock']}):"]
    for a in p["preparation"]["actions"]:
        command = a["argv"] and a["kind"] == "command"
        out.append(f"  {a['kind']:<9} {a['name']}: {a['detail']}" + (f"\n            $ {' '.join(a['argv'])}" if command else ""))
    return out


def _hash_lines(p: dict) -> list[str]:
    out = ["hashes to verify:"]
    out += [f"  {h['sha256'][:16] + '…' if h['sha256'] != 'unpinned' else 'unpinned (lock)':<18} {h['path']}" for h in p["hashes"]]
    out.append("pins: " + ", ".join(f"{k} {v}" for k, v in p["pins"]["toolchain"].items()))
    out += [f"  commit {k} {v}" for k, v in p["pins"]["commits"].items()]
    return out


def _backend_lines(p: dict) -> list[str]:
    out = [_controls_line(p["controls"])]
    for b in p["backends"]:
        if b.get("url"):
            out.append(f"backend {b['name']}: a running server at {b['url']} (not launched or owned by the study), "
                       f"readiness {b['readiness']}")
            continue
        out.append(f"backend {b['name']} ({b['runtime']}): start {' -> '.join(b['start_order'])}")
        for proc in b["aux"] + [b["command"]]:
            env = " ".join(f"{k}={v}" for k, v in proc["env"].items())
            out.append(f"  {proc['name']}: {env + ' ' if env else ''}{' '.join(proc['argv'])}")
    return out


def _load_lines(steps: list[dict]) -> list[str]:
    """One line per load level (workloads with a `load`): how it loads the backend, its passes."""
    levels: dict[tuple[str, str], dict] = {}
    for x in steps:
        if "level" in x:
            entry = levels.setdefault((x["workload"], x["level"]), {**x["load"], "passes": []})
            entry["passes"].append(f"{x['phase']}#{x['pass']}")
            if "latency_bound_ms" in x:
                entry["latency_bound_ms"] = x["latency_bound_ms"]
    return [f"load level {workload}/{level}: " + ", ".join(f"{k}={v}" for k, v in spec.items()
                                                             if k not in ("id", "passes"))
            + f" ({', '.join(spec['passes'])})" for (workload, level), spec in levels.items()]


def _pass_and_gate_lines(p: dict) -> list[str]:
    out = []
    for s in p["passes"][:1]:
        out.append("passes per backend: " + ", ".join(
            f"{x['phase']}" + (f" {x['workload']}#{x['pass']}" if "workload" in x else "")
            + (f" @{x['level']}" if "level" in x else "") for x in s["steps"]))
        out += _load_lines(s["steps"])
    if p["traces"]["enabled"]:
        out.append(f"traces: {len(p['traces'].get('items', []))} (opt-in, Nsight Systems, outside timed passes)")
    out.append("gates:")
    out += [f"  {g['name']} [{g['kind']}] " + ", ".join(f"{k}={v}" for k, v in g.items()
                                                     if k not in ("name", "kind", "description") and v is not None)
            for g in p["gates"]]
    return out


def _print_plan(p: dict) -> None:
    out = [f"study {p['study']['id']} ({p['study']['date']}): {p['study']['purpose']}",
           f"recipe {p['recipe']['path']} sha256 {p['recipe']['sha256']}",
           f"inputs root {p['inputs_root']}" + ("  [needs `invoke prepare`]" if p["needs_preparation"] else "")]
    if p["images"]:
        out.append("images: " + ", ".join(p["images"]))
    out += _preparation_lines(p) + _hash_lines(p) + _backend_lines(p) + _pass_and_gate_lines(p)
    print("\n".join(out))


def _controls_line(controls: dict) -> str:
    """What the study pins, in words: never a Python None."""
    gpu = controls.get("gpu") or {}
    parts = []
    if gpu:
        parts.append(" ".join(str(x) for x in ("GPU", gpu.get("index"), gpu.get("uuid")) if x is not None))
    if controls.get("numa_node") is not None:
        parts.append(f"NUMA {controls['numa_node']}")
    if controls.get("cpus") is not None:
        parts.append(f"CPUs {controls['cpus']}")
    return "controls: " + (", ".join(parts) if parts else "none (no GPU, NUMA node or CPU list pinned)")


@task(help={"recipe": "recipe YAML file", "json": "print the plan as JSON",
            "inputs": "inputs root (default: the recipe's inputs.root)", "runtime": "override every backend's runtime"})
@user_errors
def plan(c, recipe, json_=False, inputs=None, runtime=None):
    """Print the fully resolved plan of a recipe, and validate every pin, without network or GPU."""
    from ..study.plan import resolve_plan
    from ..study.resolved import resolve_recipe

    study = resolve_recipe(Path(recipe), inputs_root_override=Path(inputs) if inputs else None, apply_lock=False)
    resolved = resolve_plan(study, runtime=runtime)
    if json_:
        print(json.dumps(resolved, indent=1))
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
            print(f"[{'done' if a.done else 'todo'}] {a.kind} {a.name}: {a.detail}")
            if a.argv and a.kind == "command":
                print(f"       $ {' '.join(a.argv)}")
        return
    run_prepare(loaded, path, root=root, python=python or sys.executable)

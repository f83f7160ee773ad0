"""Tasks: `invoke plan` (what a study will do) and `invoke prepare` (fetch, build, lock inputs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from invoke import task

from . import user_errors

__all__ = ["plan", "prepare"]


def _print_plan(p: dict) -> None:
    out = [f"study {p['study']['id']} ({p['study']['date']}): {p['study']['purpose']}",
           f"recipe {p['recipe']['path']} sha256 {p['recipe']['sha256']}",
           f"inputs root {p['inputs_root']}" + ("  [needs `invoke prepare`]" if p["needs_preparation"] else "")]
    if p["images"]:
        out.append("images: " + ", ".join(p["images"]))
    if p["preparation"]:
        out.append(f"preparation (lock {p['preparation']['lock']}):")
        out += [f"  {a['kind']:<9} {a['name']}: {a['detail']}" + (f"\n            $ {' '.join(a['argv'])}" if a["argv"] and a["kind"] == "command" else "")
                for a in p["preparation"]["actions"]]
    out.append("hashes to verify:")
    out += [f"  {h['sha256'][:16] + '…' if h['sha256'] != 'unpinned' else 'unpinned (lock)':<18} {h['path']}" for h in p["hashes"]]
    out.append("pins: " + ", ".join(f"{k} {v}" for k, v in p["pins"]["toolchain"].items()))
    out += [f"  commit {k} {v}" for k, v in p["pins"]["commits"].items()]
    gpu = p["controls"].get("gpu") or {}
    out.append(f"controls: GPU {gpu.get('index')} {gpu.get('uuid')}, NUMA {p['controls']['numa_node']}, CPUs {p['controls']['cpus']}")
    for b in p["backends"]:
        out.append(f"backend {b['name']} ({b['runtime']}): start {' -> '.join(b['start_order'])}")
        for proc in b["aux"] + [b["command"]]:
            env = " ".join(f"{k}={v}" for k, v in proc["env"].items())
            out.append(f"  {proc['name']}: {env + ' ' if env else ''}{' '.join(proc['argv'])}")
    for s in p["passes"][:1]:
        out.append("passes per backend: " + ", ".join(
            f"{x['phase']}" + (f" {x['workload']}#{x['pass']}" if "workload" in x else "") for x in s["steps"]))
    if p["traces"]["enabled"]:
        out.append(f"traces: {len(p['traces'].get('items', []))} (opt-in, Nsight Systems, outside timed passes)")
    out.append("gates:")
    out += [f"  {g['name']} [{g['kind']}] " + ", ".join(f"{k}={v}" for k, v in g.items() if k not in ("name", "kind", "description"))
            for g in p["gates"]]
    print("\n".join(out))


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

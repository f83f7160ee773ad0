"""The resolved plan of a study: what `invoke study` will do, computed without network or GPU.

`resolve_plan` is pure (it reads only the recipe and the optional token-count input) and its
result is JSON-serialisable; the study runner writes it to plan.json. `check_pins` validates the
format of every pin and names file:line of a malformed one.

plan format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import RecipeError
from ..evidence.recipe import UNPINNED, Backend, NoAliasLoader, Recipe, Workload, _line_map
from ..hashing import hash_file
from .placeholders import LAUNCH_NAMES, fill
from .preparation import plan_prepare
from .resolved import ResolvedRecipe
from .traces import plan_traces

__all__ = ["PLAN_FORMAT_VERSION", "REPRO_ROOT", "check_pins", "resolve_plan", "runner_placeholders"]

PLAN_FORMAT_VERSION = 1
REPRO_ROOT = Path(__file__).resolve().parents[2]  # the directory holding openjev_repro ({repro})
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _pins(recipe: Recipe) -> list[tuple[tuple, str, str]]:
    """(field path, value, kind) of every pin in the recipe."""
    pins: list[tuple[tuple, str, str]] = []
    for i, f in enumerate(recipe.inputs.files):
        pins.append((("inputs", "files", i, "sha256"), f.sha256, "sha256"))
        if f.published_sha256:
            pins.append((("inputs", "files", i, "published_sha256"), f.published_sha256, "sha256"))
    for i, b in enumerate(recipe.backends):
        pins += [(("backends", i, "artifacts", j, "sha256"), a.sha256, "sha256") for j, a in enumerate(b.artifacts)]
    if recipe.preparation is not None:
        prep = recipe.preparation
        pins += [(("preparation", "downloads", i, "revision"), d.revision, "hf_revision") for i, d in enumerate(prep.downloads)]
        pins += [(("preparation", "sources", i, "commit"), s.commit, "commit") for i, s in enumerate(prep.sources)]
    pins += [(("pins", "commits", k), v, "commit") for k, v in recipe.pins.commits.items()]
    pins += [(("pins", "sha256", k), v, "sha256") for k, v in recipe.pins.sha256.items()]
    if recipe.controls.gpu is not None:
        pins.append((("controls", "gpu", "uuid"), recipe.controls.gpu.uuid, "gpu_uuid"))
    return pins


def _pin_ok(value: str, kind: str) -> bool:
    if kind == "sha256":
        return value == UNPINNED or bool(_HEX64.match(value))
    if kind in ("commit", "hf_revision"):
        return bool(_HEX40.match(value))
    return bool(_UUID.match(value))


def check_pins(recipe: Recipe, recipe_path: Path) -> list[dict]:
    """Every pin with its kind and status; RecipeError naming file:line if any is malformed."""
    text = Path(recipe_path).read_text(encoding="utf-8")
    node = yaml.compose(text, Loader=NoAliasLoader)
    lines = _line_map(node) if node is not None else {}  # an empty file has no node
    checked, bad = [], []
    for path, value, kind in _pins(recipe):
        ok = _pin_ok(value, kind)
        field = ".".join(str(p) for p in path)
        checked.append({"field": field, "kind": kind, "value": value, "status": "unpinned" if value == UNPINNED else "ok"})
        if not ok:
            bad.append(f"{recipe_path}:{lines.get(path, 1)}: {field}: {value!r} is not a valid {kind}")
    if bad:
        raise RecipeError("Malformed pins:\n  " + "\n  ".join(bad))
    return checked


def runner_placeholders(root: Path) -> dict[str, str]:
    """Placeholders known before launch; the other LAUNCH_NAMES and {port.<aux>} stay for the runner."""
    return {"inputs": str(root), "repro": str(REPRO_ROOT)}


def _process(name: str, argv: list[str], env: dict[str, str], values: dict[str, str], where: str,
             aux_before: list[str], **extra) -> dict:
    # Left for the runner on purpose: what only launch knows, and the ports of the earlier aux processes
    # (an aux process's own too).
    deferred = (LAUNCH_NAMES - values.keys()) | {f"port.{a}" for a in aux_before}
    return {"name": name, "argv": [fill(a, values, f"{where} command", deferred=deferred) for a in argv],
            "env": {k: fill(v, values, f"{where} env {k}", deferred=deferred) for k, v in sorted(env.items())}, **extra}


def _backends(recipe: Recipe, values: dict[str, str], runtime: str | None) -> list[dict]:
    out = []
    for b in recipe.backends:
        names = [a.name for a in b.aux]
        aux = [_process(a.name, a.command, a.env, values, f"backend {b.name}.{a.name}", names[:i + 1], health=a.health,
                        port=a.port or f"free ({{port.{a.name}}})",
                        ready_timeout_s=a.ready_timeout_s or recipe.protocol.ready_timeout_s) for i, a in enumerate(b.aux)]
        out.append({"name": b.name, "runtime": runtime or b.runtime, "image": b.image, "description": b.description,
                    "start_order": names + ["command"],
                    "stop_order": ["command"] + names[::-1],
                    "aux": aux, "command": _process("command", b.command, b.env, values, f"backend {b.name}", names,
                                                    health=b.health),
                    "endpoint": b.endpoint, "model": b.model, **_reach(b), **_environment(recipe, b)})
    return out


def _environment(recipe: Recipe, backend) -> dict:
    """What the backend must report once ready (checked before measuring), when the recipe declares any."""
    declared = recipe.environment_of(backend).model_dump(mode="json", exclude_defaults=True)
    return {"environment": declared} if declared else {}


def _reach(b: Backend) -> dict[str, Any]:
    """How the study reaches a backend: launched (and owned) by it, or a running server at `url` (neither)."""
    return {"launched": b.launched, "owned": b.launched, "url": b.url, "readiness": b.readiness,
            "health": b.health, "cwd": b.cwd}


def _passes(recipe: Recipe) -> list[dict]:
    seq: list[dict[str, Any]] = []
    for b in recipe.backends:
        steps: list[dict[str, str | int | bool | None]] = []
        if recipe.protocol.first_inference:
            steps.append({"phase": "first", "detail": "first inference after readiness (excluded)"})
        warm = recipe.protocol.warmup
        steps.append({"phase": "warmup", "longest_first": warm.longest_first, "longest_of": warm.longest_of,
                      "requests": warm.requests})
        for w in recipe.workloads:
            steps += _workload_steps(recipe, w)
        seq.append({"backend": b.name, "server": "one server reused for every pass", "steps": steps})
    return seq


def _workload_steps(recipe: Recipe, w: Workload) -> list[dict[str, str | int | bool | None]]:
    """A workload's timed passes; with a `load`, each level's passes in turn, the level named (and how it loads)."""
    feas, meas = recipe.passes_per_level(w)
    steps: list[dict[str, Any]] = []
    for number, level in enumerate(w.levels() or [None]):
        extra: dict[str, Any] = {} if level is None else {"level": level.id, "load": level.to_dict()}
        if level is not None and w.load is not None and w.load.latency_bound_ms is not None:
            extra["latency_bound_ms"] = w.load.latency_bound_ms
        steps += [{"phase": "feasibility", "workload": w.name, "pass": number * feas + i, **extra}
                  for i in range(1, feas + 1)]
        steps += [{"phase": "measured", "workload": w.name, "pass": number * meas + i, **extra}
                  for i in range(1, meas + 1)]
    return steps


def _hashes(recipe: Recipe) -> list[dict]:
    rows = [{"path": f.path, "sha256": f.sha256, "role": f.role, "published_sha256": f.published_sha256}
            for f in recipe.inputs.files]
    seen = {r["path"] for r in rows}
    for b in recipe.backends:
        for a in b.artifacts:
            if a.path not in seen:
                seen.add(a.path)
                rows.append({"path": a.path, "sha256": a.sha256, "role": f"artifact of {b.name}", "published_sha256": None})
    return rows


def _token_counts(recipe: Recipe, root: Path) -> list[int] | None:
    if recipe.traces is None or not recipe.traces.enabled or recipe.traces.token_counts is None:
        return None
    path = root / recipe.traces.token_counts
    if not path.is_file():
        return None
    return list(json.loads(path.read_text(encoding="utf-8"))["input_tokens"])


def resolve_plan(study: ResolvedRecipe, *, runtime: str | None = None) -> dict:
    """The fully resolved plan of a resolved recipe as a JSON-serialisable dict (no network, no GPU, no writes)."""
    recipe, recipe_path, root = study.recipe, study.path, study.root
    values = runner_placeholders(root)
    prep = recipe.preparation
    preparation = None
    if prep is not None:
        preparation = {"lock": str(study.lock_path),
                       "downloads": [d.model_dump(mode="json") for d in prep.downloads],
                       "sources": [s.model_dump(mode="json") for s in prep.sources],
                       "provided": list(prep.provided),
                       "actions": [a.to_dict() for a in plan_prepare(recipe, recipe_path, root=root,
                                                                     python="{python}", probe=False)]}
    counts = _token_counts(recipe, root)
    traces: dict = {"enabled": bool(recipe.traces and recipe.traces.enabled)}
    if recipe.traces is not None and recipe.traces.enabled:
        traces["items"] = [i.to_dict() for i in plan_traces(recipe, counts)] if counts else []
        if not counts:
            traces["note"] = f"token counts {recipe.traces.token_counts} not present yet; items resolved at run time"
    return {
        "format_version": PLAN_FORMAT_VERSION,
        "study": recipe.study.model_dump(mode="json"),
        "recipe": {"path": str(recipe_path), "sha256": hash_file(recipe_path)},
        "inputs_root": str(root),
        "runtime": runtime,
        "images": sorted({b.image for b in recipe.backends if b.image}),
        "needs_preparation": bool(recipe.unpinned()),
        "unpinned": recipe.unpinned(),
        "preparation": preparation,
        "hashes": _hashes(recipe),
        "pins": {"checked": check_pins(recipe, recipe_path), **recipe.pins.model_dump(mode="json")},
        "controls": recipe.controls.model_dump(mode="json"),
        "protocol": recipe.protocol.model_dump(mode="json"),
        "backends": _backends(recipe, values, runtime),
        "passes": _passes(recipe),
        "traces": traces,
        "gates": [g.model_dump(mode="json") for g in recipe.gates],
        "notes": list(recipe.notes),
    }

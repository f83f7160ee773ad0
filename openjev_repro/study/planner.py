"""The resolved plan of a study: what `invoke study` will do, computed without network or GPU.

`resolve_plan` is pure (it reads only the recipe and the optional token-count input) and returns
the typed record `evidence.plan.Plan`; the study runner writes its `to_json()` to plan.json. `check_pins` validates the
format of every pin and names file:line of a malformed one.

plan.json's format history is in evidence/plan.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ..errors import RecipeError
from ..evidence.decoding import UNSET
from ..evidence.plan import (
    PLAN_FORMAT_VERSION,
    DeclaredEnvironment,
    PinCheck,
    Plan,
    PlanAction,
    PlanBackend,
    PlanHash,
    PlanLoad,
    PlannedTrace,
    PlanPreparation,
    PlanProcess,
    PlanSequence,
    PlanStep,
    PlanTraces,
    every_field_set,
)
from ..evidence.recipe import UNPINNED, Backend, NoAliasLoader, Recipe, _line_map
from ..hashing import hash_file
from .placeholders import LAUNCH_NAMES, fill
from .preparation import plan_prepare
from .resolved import ResolvedRecipe
from .traces import plan_traces

__all__ = ["PLAN_FORMAT_VERSION", "REPRO_ROOT", "check_pins", "resolve_plan"]

REPRO_ROOT = Path(__file__).resolve().parents[2]  # the directory holding openjev_repro ({repro})
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


Pin = tuple[tuple, str, str]  # (field path in the recipe, value, kind)


def _pins(recipe: Recipe) -> list[Pin]:
    """(field path, value, kind) of every pin in the recipe: inputs and artifacts, preparation, pins, GPU."""
    pins: list[Pin] = []
    for i, f in enumerate(recipe.inputs.files):
        pins.append((("inputs", "files", i, "sha256"), f.sha256, "sha256"))
        if f.published_sha256:
            pins.append((("inputs", "files", i, "published_sha256"), f.published_sha256, "sha256"))
    for i, b in enumerate(recipe.backends):
        pins += [(("backends", i, "artifacts", j, "sha256"), a.sha256, "sha256") for j, a in enumerate(b.artifacts)]
    prep = recipe.preparation
    if prep is not None:
        pins += [(("preparation", "downloads", i, "revision"), d.revision, "hf_revision")
                 for i, d in enumerate(prep.downloads)]
        pins += [(("preparation", "sources", i, "commit"), s.commit, "commit") for i, s in enumerate(prep.sources)]
    pins += [(("pins", "commits", k), v, "commit") for k, v in recipe.pins.commits.items()]
    pins += [(("pins", "sha256", k), v, "sha256") for k, v in recipe.pins.sha256.items()]
    if recipe.controls.gpu is not None:
        pins.append((("controls", "gpu", "uuid"), recipe.controls.gpu.uuid, "gpu_uuid"))
    return pins


def check_pins(recipe: Recipe, recipe_path: Path) -> list[PinCheck]:
    """Every pin with its kind and status; RecipeError naming file:line if any is malformed."""
    text = Path(recipe_path).read_text(encoding="utf-8")
    node = yaml.compose(text, Loader=NoAliasLoader)
    lines = _line_map(node) if node is not None else {}  # an empty file has no node
    checked, bad = [], []
    for path, value, kind in _pins(recipe):
        if kind == "sha256":
            ok = value == UNPINNED or bool(_HEX64.match(value))
        else:
            ok = bool((_HEX40 if kind in ("commit", "hf_revision") else _UUID).match(value))
        field = ".".join(str(p) for p in path)
        checked.append(PinCheck(field=field, kind=kind, value=value, status="unpinned" if value == UNPINNED else "ok"))
        if not ok:
            bad.append(f"{recipe_path}:{lines.get(path, 1)}: {field}: {value!r} is not a valid {kind}")
    if bad:
        raise RecipeError("Malformed pins:\n  " + "\n  ".join(bad))
    return checked


def _process(name: str, argv: list[str], env: dict[str, str], values: dict[str, str], where: str,
             aux_before: list[str], health: str | None, **aux: str | float | None) -> PlanProcess:
    # Left for the runner on purpose: what only launch knows, and the ports of the earlier aux processes
    # (an aux process's own too).
    deferred = (LAUNCH_NAMES - values.keys()) | {f"port.{a}" for a in aux_before}
    return PlanProcess(name=name, argv=tuple(fill(a, values, f"{where} command", deferred=deferred) for a in argv),
                       env={k: fill(v, values, f"{where} env {k}", deferred=deferred) for k, v in sorted(env.items())},
                       health=health, **aux)  # type: ignore[arg-type]


def _backend(recipe: Recipe, b: Backend, values: dict[str, str], runtime: str | None) -> PlanBackend:
    names = [a.name for a in b.aux]
    aux = tuple(_process(a.name, a.command, a.env, values, f"backend {b.name}.{a.name}", names[:i + 1], a.health,
                         port=a.port or f"free ({{port.{a.name}}})",
                         ready_timeout_s=a.ready_timeout_s or recipe.protocol.ready_timeout_s)
                for i, a in enumerate(b.aux))
    fixed = {} if b.port is None else {"port": b.port}
    command = _process("command", b.command, b.env, values, f"backend {b.name}", names, b.health, **fixed)
    # the working directory filled as the argv is ({inputs}, {repro}, ...); launch-time names left for the runner
    cwd = None if b.cwd is None else fill(b.cwd, values, f"backend {b.name} cwd", deferred=LAUNCH_NAMES - values.keys())
    # What the backend must report once ready (checked before measuring), when the recipe declares any.
    declared = recipe.environment_of(b).model_dump(mode="json", exclude_defaults=True)
    return PlanBackend(name=b.name, runtime=runtime or b.runtime, image=b.image, description=b.description,
                       aux=aux, command=command, endpoint=b.endpoint, model=b.model, url=b.url,
                       launched=b.url is None, owned=b.url is None, readiness=b.readiness, health=b.health, cwd=cwd,
                       environment=DeclaredEnvironment(**declared) if declared else UNSET,
                       headers_from_env=dict(b.headers_from_env) if b.headers_from_env else UNSET)


def _steps(recipe: Recipe) -> tuple[PlanStep, ...]:
    """Every backend's sequence: first inference, then per workload its warm-up and its passes (a warm-up
    names its workload when the recipe has several; one without a name warms up the only one)."""
    steps: list[PlanStep] = []
    if recipe.protocol.first_inference:
        steps.append(PlanStep(phase="first", detail="first inference after readiness (excluded)"))
    several = len(recipe.workloads) > 1
    for w in recipe.workloads:
        steps.append(PlanStep.warm_up(recipe.protocol.warmup, w.name if several else None))
        # its timed passes; with a `load`, each level's passes in turn, the level named (and how it loads)
        feas, meas = recipe.passes_per_level(w)
        bound = w.load.latency_bound_ms if w.load is not None and w.load.latency_bound_ms is not None else UNSET
        for number, level in enumerate(w.levels() or [None]):
            extra = {} if level is None else {"level": level.id, "load": PlanLoad(**level.to_dict()),
                                              "latency_bound_ms": bound}
            steps += [PlanStep(phase="feasibility", workload=w.name, index=number * feas + i, **extra)  # type: ignore[arg-type]
                      for i in range(1, feas + 1)]
            steps += [PlanStep(phase="measured", workload=w.name, index=number * meas + i, **extra)  # type: ignore[arg-type]
                      for i in range(1, meas + 1)]
    return tuple(steps)


def _hashes(recipe: Recipe) -> list[PlanHash]:
    rows = [PlanHash(path=f.path, sha256=f.sha256, role=f.role, published_sha256=f.published_sha256)
            for f in recipe.inputs.files]
    seen = {r.path for r in rows}
    for b in recipe.backends:
        for a in b.artifacts:
            if a.path not in seen:
                seen.add(a.path)
                rows.append(PlanHash(path=a.path, sha256=a.sha256, role=f"artifact of {b.name}", published_sha256=None))
    return rows


def _token_counts(recipe: Recipe, root: Path) -> list[int] | None:
    if recipe.traces is None or not recipe.traces.enabled or recipe.traces.token_counts is None:
        return None
    path = root / recipe.traces.token_counts
    if not path.is_file():
        return None
    return list(json.loads(path.read_text(encoding="utf-8"))["input_tokens"])


def _preparation(study: ResolvedRecipe) -> PlanPreparation | None:
    prep = study.recipe.preparation
    if prep is None:
        return None
    actions = plan_prepare(study.recipe, study.path, root=study.root, python="{python}", probe=False)
    return PlanPreparation(lock=str(study.lock_path), downloads=tuple(every_field_set(d) for d in prep.downloads),
                           sources=tuple(every_field_set(s) for s in prep.sources), provided=tuple(prep.provided),
                           actions=tuple(PlanAction(kind=a.kind, name=a.name, detail=a.detail, argv=tuple(a.argv),
                                                    env=dict(a.env or {}), cwd=a.cwd, target=a.target, done=a.done)
                                         for a in actions))


def _traces(recipe: Recipe, root: Path) -> PlanTraces:
    if recipe.traces is None or not recipe.traces.enabled:
        return PlanTraces(enabled=False)
    counts = _token_counts(recipe, root)
    if not counts:
        return PlanTraces(enabled=True, items=(), note=f"token counts {recipe.traces.token_counts} not present yet; "
                          "items resolved at run time")
    return PlanTraces(enabled=True, items=tuple(PlannedTrace(**i.to_dict()) for i in plan_traces(recipe, counts)))


def resolve_plan(study: ResolvedRecipe, *, runtime: str | None = None) -> Plan:
    """The fully resolved plan of a resolved recipe (no network, no GPU, no writes); `.to_json()` is plan.json's."""
    recipe, root = study.recipe, study.root
    values = {"inputs": str(root), "repro": str(REPRO_ROOT)}  # known before launch: the other LAUNCH_NAMES
    # and {port.<aux>} stay for the runner
    return Plan(
        study=every_field_set(recipe.study), recipe_path=str(study.path), recipe_sha256=hash_file(study.path), inputs_root=str(root),
        runtime=runtime, images=tuple(sorted({b.image for b in recipe.backends if b.image})),
        unpinned=tuple(recipe.unpinned()), preparation=_preparation(study), hashes=tuple(_hashes(recipe)),
        pins_checked=tuple(check_pins(recipe, study.path)), pins=every_field_set(recipe.pins),
        controls=every_field_set(recipe.controls), protocol=every_field_set(recipe.protocol), backends=tuple(_backend(recipe, b, values, runtime) for b in recipe.backends),
        passes=tuple(PlanSequence(backend=b.name, steps=_steps(recipe)) for b in recipe.backends),
        traces=_traces(recipe, root), gates=tuple(every_field_set(g) for g in recipe.gates), notes=tuple(recipe.notes))

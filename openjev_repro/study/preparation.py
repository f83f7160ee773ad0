"""Preparation: fetch, build and select a recipe's inputs, then lock their hashes.

Compute the plan, then act: `plan_prepare` returns the steps (pure, no network), `run_prepare`
performs them in order, skipping what is already done. Steps: Hugging Face downloads at pinned
revisions (huggingface_hub, imported lazily), git checkouts at pinned commits, our JevBench
request selection, upstream commands (export, builds), then hashing. Every hash the recipe pins
is verified; every `unpinned` one is written to the inputs lock, which `locked_recipe` reads.
Nothing here is timed: downloads and builds never count as measured time.

Inputs lock (JSON, `recipes/locks/<study id>.inputs.lock`), format history:
    1  (2026-11) first version: study_id, pins (download revisions, source commits),
       files {path: {sha256, size, origin}}, published {path: {published, actual, match}}.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..errors import CheckpointError, EvidenceError, InputMismatch, RecipeError
from ..evidence.decoding import UNSET, Count, Record, Text, UnsetType, decode
from ..evidence.files import check_format, read_jsonl, write_bytes_atomic, write_json_atomic
from ..evidence.recipe import UNPINNED, InputFile, Preparation, Recipe, RequestSelection, inputs_root, lock_path
from ..hashing import hash_file
from .placeholders import fill

__all__ = [
    "LOCK_FORMAT_VERSION",
    "PrepareAction",
    "lock_fingerprint",
    "locked_recipe",
    "placeholders",
    "plan_prepare",
    "read_lock",
    "run_prepare",
    "select_requests",
    "write_request_file",
]

LOCK_FORMAT_VERSION = 1
HF_INSTALL_HINT = "pip install 'huggingface_hub>=0.25'"


@dataclass(frozen=True)
class PrepareAction:
    """One step of preparation; `done` is judged from the files present when planned."""

    kind: str  # download | checkout | requests | command | provided | verify | lock
    name: str
    detail: str  # a sentence for people
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    target: str | None = None  # absolute path this step makes
    done: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


# --- placeholders (filled by placeholders.fill) ----------------------------------------


def placeholders(recipe: Recipe, root: Path, python: str = sys.executable) -> dict[str, str]:
    """{python} {inputs} {source.<name>} {download.<name>} for preparation commands."""
    values = {"python": python, "inputs": str(root)}
    prep = recipe.preparation
    if prep is not None:
        values.update({f"source.{s.name}": str(root / s.dest) for s in prep.sources})
        values.update({f"download.{d.name}": str(root / d.dest) for d in prep.downloads})
    return values


# --- our request selection ---------------------------------------------------------------


def _tasks_of_types(checkout: Path, rel: str, types: Collection[str]) -> list[bytes]:
    """The lines of one JevBench file whose question type is one of `types`, byte-exact, in file order."""
    path = checkout / rel
    if not path.is_file():
        raise InputMismatch(f"JevBench checkout {checkout} has no {rel}; check the source commit.")
    data = path.read_bytes()
    lines = data.splitlines()
    chosen: list[bytes] = []
    for number, task in read_jsonl(path, "a JevBench task", error=InputMismatch, data=data):
        try:
            kind = task["question"]["type"]
        except (KeyError, TypeError) as exc:
            raise InputMismatch(f"{path}:{number}: not a JevBench task ({exc!r}).") from exc
        if kind in types:
            chosen.append(lines[number - 1])
    return chosen


def _at_positions(chosen: list[bytes], positions: list[int] | None) -> list[bytes]:
    """The selected tasks at the 1-based `positions` (all of them when there are none)."""
    if not positions:
        return chosen
    if max(positions) > len(chosen):
        raise InputMismatch(f"Position {max(positions)} is beyond the {len(chosen)} selected tasks.")
    return [chosen[p - 1] for p in positions]


def select_requests(checkout: Path, selection: RequestSelection) -> list[bytes]:
    """JevBench task lines of the selected types, files in the given order, lines byte-exact."""
    chosen = [line for rel in selection.files for line in _tasks_of_types(checkout, rel, selection.types)]
    if selection.expect_count is not None and len(chosen) != selection.expect_count:
        raise InputMismatch(f"JevBench at {checkout} has {len(chosen)} tasks of types {selection.types}, "
                            f"the recipe expects {selection.expect_count}; check the pinned commit.")
    return _at_positions(chosen, selection.positions)


def write_request_file(lines: list[bytes], dest: Path) -> None:
    """JSONL, one task a line, newline-terminated; written atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(dest, b"".join(line + b"\n" for line in lines))


# --- the plan ----------------------------------------------------------------------------


def _fetch_actions(prep: Preparation, root: Path, probe: bool) -> list[PrepareAction]:
    """Downloads, checkouts and request selections, each done when its output is already there."""
    actions: list[PrepareAction] = []
    for d in prep.downloads:
        target = root / d.dest
        patterns = f" ({', '.join(d.include)})" if d.include else ""
        actions.append(PrepareAction("download", d.name, f"Download {d.repo}@{d.revision}{patterns} to {target}.",
                                     target=str(target), done=probe and (target / ".prepared").is_file()))
    for s in prep.sources:
        target = root / s.dest
        actions.append(PrepareAction(
            "checkout", s.name, f"Check out {s.url} at {s.commit} into {target}.",
            argv=["git", "-C", str(target), "checkout", "--detach", s.commit], target=str(target),
            done=probe and _head(target) == s.commit))
    for r in prep.requests:
        target = root / r.dest
        where = f", positions {r.positions}" if r.positions else ""
        actions.append(PrepareAction("requests", r.dest, f"Select {'/'.join(r.types)} tasks of {', '.join(r.files)} "
                                     f"from source {r.source} in file order{where} into {target}.",
                                     target=str(target), done=probe and target.is_file()))
    return actions


def _step_actions(prep: Preparation, root: Path, values: dict[str, str], probe: bool) -> list[PrepareAction]:
    """The recipe's commands (placeholders filled) and the files an operator provides."""
    actions: list[PrepareAction] = []
    for step in prep.steps:
        target = root / step.produces
        where = f"preparation step {step.name}"
        actions.append(PrepareAction(
            "command", step.name, step.description or f"Run step {step.name}.",
            argv=[fill(a, values, f"{where} command") for a in step.command],
            env={k: fill(v, values, f"{where} env {k}") for k, v in step.env.items()},
            cwd=fill(step.cwd, values, f"{where} cwd") if step.cwd else str(root), target=str(target),
            done=probe and target.exists()))
    for path in prep.provided:
        target = root / path
        actions.append(PrepareAction("provided", path, f"Operator places {target} (not reproducible from public "
                                     "pins); its hash is locked when first seen.", target=str(target),
                                     done=probe and target.is_file()))
    return actions


def plan_prepare(recipe: Recipe, recipe_path: Path, *, root: Path | None = None,
                 python: str = sys.executable, probe: bool = True) -> list[PrepareAction]:
    """Every step prepare would take, in order; with `probe`, each marked done if its output exists."""
    prep = recipe.preparation
    if prep is None:
        raise RecipeError(f"Recipe {recipe.study.id} has no `preparation` section; nothing to prepare.")
    root = inputs_root(recipe_path, recipe, root)
    values = placeholders(recipe, root, python)
    actions = _fetch_actions(prep, root, probe) + _step_actions(prep, root, values, probe)
    actions.append(PrepareAction("verify", "hashes", f"Hash every declared input under {root}: verify pinned hashes, "
                                 "lock unpinned ones and every file of " + (", ".join(prep.lock_trees) or "no tree") + "."))
    actions.append(PrepareAction("lock", "lock", f"Write the inputs lock {lock_path(recipe, recipe_path)}.",
                                 target=str(lock_path(recipe, recipe_path))))
    return actions


def _head(checkout: Path) -> str | None:
    if not (checkout / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() if done.returncode == 0 else None


# --- acting --------------------------------------------------------------------------------


def run_prepare(recipe: Recipe, recipe_path: Path, *, root: Path | None = None, python: str = sys.executable,
                say: Callable[[str], None] = print) -> dict:
    """Perform every step not yet done, verify every pinned hash, write and return the lock."""
    root = inputs_root(recipe_path, recipe, root)
    actions = plan_prepare(recipe, recipe_path, root=root, python=python)
    prep = recipe.preparation
    assert prep is not None  # plan_prepare refused otherwise
    for action in actions:
        if action.done:
            say(f"done already: {action.kind} {action.name}")
            continue
        say(f"{action.kind} {action.name}: {action.detail}")
        _act(action, prep, root)
    lock = _build_lock(recipe, recipe_path, root, say)
    _write_json(lock_path(recipe, recipe_path), lock.to_json())
    say(f"wrote {lock_path(recipe, recipe_path)}")
    return lock.to_json()


def _act_download(action: PrepareAction, prep: Preparation, root: Path) -> None:
    _download(next(d for d in prep.downloads if d.name == action.name), root)


def _act_checkout(action: PrepareAction, prep: Preparation, root: Path) -> None:
    _checkout(next(s for s in prep.sources if s.name == action.name), root)


def _act_requests(action: PrepareAction, prep: Preparation, root: Path) -> None:
    sel = next(r for r in prep.requests if r.dest == action.name)
    source = next(s for s in prep.sources if s.name == sel.source)
    write_request_file(select_requests(root / source.dest, sel), root / sel.dest)


def _act_command(action: PrepareAction, prep: Preparation, root: Path) -> None:
    _run_step(action)


def _act_provided(action: PrepareAction, prep: Preparation, root: Path) -> None:
    raise InputMismatch(f"{action.target} is missing: this input is not reproducible from public pins; "
                        "place the operator's copy there and run prepare again.")


_ACTIONS: dict[str, Callable[[PrepareAction, Preparation, Path], None]] = {
    "download": _act_download, "checkout": _act_checkout, "requests": _act_requests,
    "command": _act_command, "provided": _act_provided}


def _act(action: PrepareAction, prep: Preparation, root: Path) -> None:
    """Perform one action of the plan (verify and lock are done by the caller, once, at the end)."""
    perform = _ACTIONS.get(action.kind)
    if perform is not None:
        perform(action, prep, root)


def _download(download, root: Path) -> None:
    try:
        from huggingface_hub import snapshot_download  # lazy: only prepare on an online host needs it
    except ImportError as exc:
        raise RecipeError(f"Downloads need huggingface_hub, which is not installed; run {HF_INSTALL_HINT} "
                          "in this environment and prepare again.") from exc
    target = root / download.dest
    # snapshot_download resumes partial files, checks sizes/etags and shows tqdm progress.
    snapshot_download(repo_id=download.repo, revision=download.revision, repo_type=download.repo_type,
                      local_dir=str(target), allow_patterns=download.include or None)
    (target / ".prepared").write_text(json.dumps({"repo": download.repo, "revision": download.revision}) + "\n")


def _checkout(source, root: Path) -> None:
    target = root / source.dest
    if not (target / ".git").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "--no-checkout", source.url, str(target)])
    if subprocess.run(["git", "-C", str(target), "cat-file", "-e", f"{source.commit}^{{commit}}"], check=False).returncode != 0:
        _git(["-C", str(target), "fetch", "origin", source.commit])
    _git(["-C", str(target), "checkout", "--detach", source.commit])
    if _head(target) != source.commit:
        raise InputMismatch(f"{target} is not at {source.commit} after checkout.")


def _git(args: list[str]) -> None:
    done = subprocess.run(["git", *args], check=False)
    if done.returncode != 0:
        raise InputMismatch(f"git {' '.join(args)} failed with status {done.returncode}; check the network and URL.")


def _run_step(action: PrepareAction) -> None:
    env = dict(os.environ, **action.env)
    if shutil.which(action.argv[0], path=env.get("PATH")) is None and not Path(action.argv[0]).exists():
        raise RecipeError(f"Step {action.name} needs {action.argv[0]!r}, which is not installed here.")
    done = subprocess.run(action.argv, env=env, cwd=action.cwd, check=False)
    if done.returncode != 0:
        raise CheckpointError(f"Step {action.name} failed with status {done.returncode}; its output is above. "
                              f"Remove any partial {action.target} before running prepare again.")
    if action.target and not Path(action.target).exists():
        raise CheckpointError(f"Step {action.name} succeeded but did not produce {action.target}.")


# --- the lock ------------------------------------------------------------------------------


class LockPins(Record, frozen=True, kw_only=True):
    """The pins a lock was made from (none without a preparation)."""

    downloads: dict[str, Text] | UnsetType = UNSET  # name -> repo@revision
    sources: dict[str, Text] | UnsetType = UNSET  # name -> commit


class LockedFile(Record, frozen=True, kw_only=True):
    sha256: Text
    size: Count
    origin: Text  # pinned | locked | tree <dir>


class PublishedCheck(Record, frozen=True, kw_only=True):
    published: Text
    actual: Text
    match: bool


class InputsLock(Record, frozen=True, kw_only=True):
    """The inputs lock `invoke prepare` writes (format LOCK_FORMAT_VERSION): every prepared file's hash."""

    format_version: int = LOCK_FORMAT_VERSION
    study_id: Text
    pins: LockPins
    written_at: Text
    files: dict[str, LockedFile]
    published: dict[str, PublishedCheck]


def lock_fingerprint(recipe: Recipe) -> LockPins:
    """The pins a lock was made from; a lock whose pins differ from the recipe's is stale."""
    prep = recipe.preparation
    if prep is None:
        return LockPins()
    return LockPins(downloads={d.name: f"{d.repo}@{d.revision}" for d in prep.downloads},
                    sources={s.name: s.commit for s in prep.sources})


def _declared(recipe: Recipe) -> list[tuple[str, str, str | None]]:
    files = [(f.path, f.sha256, f.published_sha256) for f in recipe.inputs.files]
    files += [(a.path, a.sha256, None) for b in recipe.backends for a in b.artifacts]
    first: dict[str, tuple[str, str, str | None]] = {}  # the first declaration of each path, in order
    for f in files:
        first.setdefault(f[0], f)
    return list(first.values())


def _build_lock(recipe: Recipe, recipe_path: Path, root: Path, say: Callable[[str], None]) -> InputsLock:
    prep = recipe.preparation
    files: dict[str, LockedFile] = {}
    published: dict[str, PublishedCheck] = {}
    problems: list[str] = []
    for path, pinned, pub in _declared(recipe):
        full = root / path
        if not full.is_file():
            problems.append(f"{path} is missing")
            continue
        actual = hash_file(full)
        if pinned != UNPINNED and actual != pinned:
            problems.append(f"{path} has sha256 {actual}, the recipe pins {pinned}")
        files[path] = LockedFile(sha256=actual, size=full.stat().st_size,
                                 origin="pinned" if pinned != UNPINNED else "locked")
        if pub is not None:
            published[path] = PublishedCheck(published=pub, actual=actual, match=actual == pub)
            say(f"{path}: {'matches' if actual == pub else 'differs from'} the published sha256 "
                "(serialization unverified; reported, not enforced)")
    _lock_trees(prep.lock_trees if prep else [], root, files)
    if problems:
        raise InputMismatch("Prepared inputs do not match the recipe: " + "; ".join(problems) + ".")
    return InputsLock(study_id=recipe.study.id, pins=lock_fingerprint(recipe),
                      written_at=datetime.now(UTC).isoformat(timespec="seconds"), files=files, published=published)


def _lock_trees(trees: list[str], root: Path, files: dict[str, LockedFile]) -> None:
    """Every file of the lock trees not already locked (caches excluded), added to `files` with its hash."""
    for tree in trees:
        for full in sorted((root / tree).rglob("*")):
            rel = full.relative_to(root).as_posix()
            if full.is_file() and rel not in files and "/.cache/" not in f"/{rel}":
                files[rel] = LockedFile(sha256=hash_file(full), size=full.stat().st_size, origin=f"tree {tree}")


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data, indent=1)


def read_lock(recipe: Recipe, recipe_path: Path) -> InputsLock | None:
    """The recipe's inputs lock, or None when prepare has not written one."""
    path = lock_path(recipe, recipe_path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RecipeError(f"{path} is not valid JSON; run `invoke prepare --recipe {recipe_path}` again.") from exc
    check_format(data, (LOCK_FORMAT_VERSION,), f"{path} (an inputs lock)")
    try:
        lock = decode(data, InputsLock, f"{path} (an inputs lock)")
    except EvidenceError as exc:
        raise RecipeError(f"{exc} Run `invoke prepare --recipe {recipe_path}` again.") from None
    if lock.study_id != recipe.study.id or lock.pins != lock_fingerprint(recipe):
        raise RecipeError(f"{path} was written for other pins than {recipe_path} now declares; "
                          f"run `invoke prepare --recipe {recipe_path}` again.")
    return lock


def locked_recipe(recipe: Recipe, recipe_path: Path) -> Recipe:
    """The recipe with every `unpinned` hash filled from its lock and every locked tree file declared.

    `invoke study` calls this first; it refuses a recipe that still has an unpinned input.
    """
    unpinned = recipe.unpinned()
    lock = read_lock(recipe, recipe_path)
    if lock is None:
        if unpinned:
            raise RecipeError(f"{recipe_path} leaves {len(unpinned)} hashes (e.g. {unpinned[0]}) to preparation and "
                              f"there is no inputs lock at {lock_path(recipe, recipe_path)}; "
                              f"run `invoke prepare --recipe {recipe_path}` first.")
        return recipe
    locked = lock.files
    missing = [p for p in unpinned if p not in locked]
    if missing:
        raise RecipeError(f"The inputs lock has no hash for {', '.join(missing[:3])}; run prepare again.")
    data = recipe.model_dump(mode="json")
    for entry in [*data["inputs"]["files"], *(a for b in data["backends"] for a in b["artifacts"])]:
        if entry["sha256"] == UNPINNED:
            entry["sha256"] = locked[entry["path"]].sha256
    data["inputs"]["files"] += _locked_tree_files(recipe, locked)
    return Recipe.model_validate(data)


def _locked_tree_files(recipe: Recipe, locked: dict[str, LockedFile]) -> list[dict]:
    """The files of the lock's trees that the recipe does not declare itself, as recipe inputs."""
    declared = {f.path for f in recipe.inputs.files} | {a.path for b in recipe.backends for a in b.artifacts}
    return [InputFile(path=path, sha256=entry.sha256, role=entry.origin).model_dump(mode="json")
            for path, entry in sorted(locked.items()) if path not in declared and entry.origin.startswith("tree ")]

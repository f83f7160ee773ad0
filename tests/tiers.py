"""Which tests belong to the fast tier (`make test-fast`), decided by a rule rather than a list.

A test is marked `slow` (and left out of `make test-fast`) when, following its own body, the fixtures
it uses and the helpers under tests/ or openjev_repro/ that either of them calls, it reaches something
that starts a process, runs a study or loads a model (STARTERS):

- the modules `subprocess` and `multiprocessing`, `os.fork`/`os.posix_spawn`/`os.system`/`os.exec*`;
- tests/conftest.py's `ServerProcess` and `start_server`, tests/invoking.py's `invoke`;
- the package's own process starters (`run_study`, `start_process`), Inductor's compiler;
- torch, transformers and the fixture checkpoint (a model to build or load).

Tests already marked `slow`, `docker` or `slurm` stay slow. What the rule cannot see (a package
function that starts a process deep inside) is caught when it happens: in the fast tier, a test that
starts a process fails, naming the command, so the rule (or the test's marker) is fixed the first time.
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

TESTS = Path(__file__).resolve().parent
FOLLOWED = (TESTS, TESTS.parent / "openjev_repro")  # code the rule reads: the tests' helpers and the package

# Names whose use means "this starts a process or runs a study". Attribute and bare names alike.
STARTERS = frozenset({
    "subprocess", "multiprocessing", "Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp",
    "os.system", "os.execv", "os.execve", "os.execvp", "os.execvpe", "pty.fork", "pty.spawn",
    "ServerProcess", "start_server", "invoke", "run_study", "start_process", "run_demo",
    "torch.compile", "compile_function",  # Inductor runs a C++ compiler
    # ... or loads a model: torch and transformers (seconds to import), the fixture checkpoint
    "torch", "transformers", "fixture_root", "fixture_checkpoint", "build_fixture",
})
MARKED_SLOW = frozenset({"slow", "docker", "slurm"})


@cache
def _is_ours(obj: object) -> bool:
    """A function or class defined under tests/ or openjev_repro/ (whose code the rule follows)."""
    try:
        source = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except TypeError:
        return False
    if source is None or Path(source).name == "tiers.py":
        return False
    return any(Path(source).resolve().is_relative_to(root) for root in FOLLOWED)


def _names(tree: ast.AST) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
            if isinstance(node.value, ast.Name):
                names.add(f"{node.value.id}.{node.attr}")
    return frozenset(names)


@cache
def _file_index(filename: str) -> dict[int | str, frozenset[str]]:
    """Names used by each function (keyed by its first line, decorators included) and class (by name)."""
    index: dict[int | str, frozenset[str]] = {}
    for node in ast.walk(ast.parse(Path(filename).read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            index[min([node.lineno, *(d.lineno for d in node.decorator_list)])] = _names(node)
        elif isinstance(node, ast.ClassDef):
            index[node.name] = _names(node)
    return index


@cache
def _names_in(code: Callable[..., object] | type) -> frozenset[str]:
    """Every name and `module.attribute` the source of `code` mentions (files parsed once each)."""
    try:
        filename = inspect.getsourcefile(code)
    except TypeError:
        return frozenset()
    if filename is None:
        return frozenset()
    index = _file_index(filename)
    if inspect.isclass(code):
        return index.get(code.__name__, frozenset())
    function = inspect.unwrap(code)
    first = getattr(getattr(function, "__code__", None), "co_firstlineno", None)
    return index.get(first, frozenset()) if first is not None else frozenset()


def _namespace(code: object) -> dict[str, object]:
    function = code.__func__ if inspect.ismethod(code) else code  # type: ignore[union-attr]
    if inspect.isclass(function):
        module = inspect.getmodule(function)
        return vars(module) if isinstance(module, ModuleType) else {}
    return getattr(function, "__globals__", {})


_QUIET: set[int] = set()  # code whose whole reach holds no starter (a closure once searched in full)


def starts_a_process(roots: Iterable[Callable[..., object] | type]) -> str | None:
    """The first starter name reached from `roots` through code under tests/ or openjev_repro/, or None."""
    seen: set[int] = set()
    pending = [root for root in roots if root is not None]
    while pending:
        code = pending.pop()
        if id(code) in seen or id(code) in _QUIET:
            continue
        seen.add(id(code))
        names = _names_in(code)
        hit = names & STARTERS
        if hit:
            return f"{min(hit)} (in {getattr(code, '__qualname__', code)})"
        namespace = _namespace(code)
        for name in names:
            target = namespace.get(name)
            if target is not None and (inspect.isfunction(target) or inspect.isclass(target)) and _is_ours(target):
                pending.append(target)
                if inspect.isclass(target):
                    pending.extend(member for _, member in inspect.getmembers(target, inspect.isfunction)
                                   if _is_ours(member))
    _QUIET.update(seen)  # nothing reachable from any of them starts a process
    return None


def classify(item: pytest.Item) -> str | None:
    """Why `item` is slow (a sentence), or None when it belongs to the fast tier."""
    marked = MARKED_SLOW & {mark.name for mark in item.iter_markers()}
    if marked:
        return f"marked {min(marked)}"
    roots: list[Callable[..., object] | type] = []
    function = getattr(item, "function", None)
    if function is not None:
        roots.append(function)
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for definition in (info.name2fixturedefs.get(name, ()) if info is not None else ()):
            if _is_ours(definition.func):
                roots.append(definition.func)
    reached = starts_a_process(roots)
    return f"starts a process: {reached}" if reached else None


def in_the_fast_tier(config: pytest.Config) -> bool:
    return "not slow" in (config.option.markexpr or "")


def refuse_processes_in_the_fast_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a fast-tier run, make starting a process fail the test with a message naming the command."""
    if not in_the_fast_tier(request.config):
        return

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail(f"{request.node.nodeid} started a process ({args[:2]!r}) in the fast tier: mark it slow, "
                    "or teach tests/tiers.py's STARTERS the name that starts it", pytrace=False)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "posix_spawn", "posix_spawnp"):
        monkeypatch.setattr(os, name, refuse)


FAST_TIER_CPU_S = 1.0  # a fast-tier test that uses more CPU than this is named at the end of the run


CPU_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[CPU_STARTED] = time.process_time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Stamp each teardown report with the CPU seconds its test used (setup, call, teardown), so the
    controller of an xdist run sees them too."""
    outcome = yield
    if call.when == "teardown" and CPU_STARTED in item.stash:
        outcome.get_result().user_properties.append(("cpu_s", time.process_time() - item.stash[CPU_STARTED]))


class CpuBudget:
    """In a fast-tier run, the end-of-run list of tests that used more than FAST_TIER_CPU_S of CPU
    (setup, call and teardown), to be marked slow. CPU time, not wall time, so a loaded machine does
    not move it much; a list, not a failure, so no test fails for the machine's load."""

    def __init__(self) -> None:
        self.used: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == "cpu_s" and isinstance(value, float):
                self.used[report.nodeid] = value

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        over = sorted(((s, n) for n, s in self.used.items() if s > FAST_TIER_CPU_S), reverse=True)
        terminalreporter.write_line(f"fast tier: {len(self.used)} tests used {sum(self.used.values()):.1f} s of CPU "
                                    "(setup, call and teardown; collection and start-up not counted)")
        if over:
            terminalreporter.section("fast-tier tests over their CPU budget: mark them slow")
            for seconds, nodeid in over:
                terminalreporter.write_line(f"{seconds:6.2f} s CPU  {nodeid}")

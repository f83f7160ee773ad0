"""Nothing outside the owning modules reads a run file's JSON: everyone else gets records.

A run file's JSON is read once, in evidence/ (records.py, state.py, plan.py, rundir.py, files.py,
summary.py: the edge), and decoded into its record (`records.host_of(run)`, `plan_of(run)`, ...).
This test parses every module of the package and finds each call of a reader (`RunDir.read`,
`read_unversioned`, `read_json`, `read_versioned`, `json.load(s)`, `read_text`, `read_bytes`,
`open`) whose call mentions a run file's name as a literal (`run.read("host.json")`,
`(path / "state.json").read_text()`) or reads a run file by a name held in a variable, and each
call of a dict view of state.json (`.state()`, `.effective_state()`: RunDir has none now).

The signed statement copies some run files whole and verify compares them with that copy; both
get the document from `RunDir.as_written(name)`, at the edge, and read no key of it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openjev_repro"

RUN_FILES = frozenset({"state.json", "plan.json", "inputs.json", "environment.json", "host.json", "processes.json",
                       "backends.json", "servers.json", "summary.json", "import.json", "environment_check.json",
                       "calibration.json"})
READERS = frozenset({"read", "read_unversioned", "read_json", "read_versioned", "load", "loads", "read_text",
                     "read_bytes", "open", "loads_bounded"})
DICT_VIEWS = frozenset({"state", "effective_state"})  # dict views of state.json (gone; never again)

# The edge: the modules that own the run files' records and their one reader.
OWNERS = frozenset({"evidence/records.py", "evidence/state.py", "evidence/plan.py", "evidence/rundir.py",
                    "evidence/files.py",
                    "evidence/summary.py"})  # summary.json's record: lane results

def _run_file_names(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in RUN_FILES}


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _reads_a_run(call: ast.Call) -> bool:
    """`RunDir(...).read(name)`, `run.read(name)`: a run file read by a name that is not written out."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in ("read", "read_unversioned") or len(call.args) != 1:
        return False
    receiver = func.value
    if isinstance(receiver, ast.Call):
        return _called_name(receiver) in ("RunDir", "open")
    return isinstance(receiver, ast.Name) and "run" in receiver.id.lower()


def raw_reads(source: str) -> set[str]:
    """The run files (and dict views, as "state()") a module's source reads without a record."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node) or ""
        if name in READERS or "read" in name.lower():  # a module's own reading helper (`_read`) too
            files = _run_file_names(node)
            found |= files or ({"RunDir.read(name)"} if _reads_a_run(node) else set())
        elif name in DICT_VIEWS and not node.args and not node.keywords and isinstance(node.func, ast.Attribute):
            found.add(f"{name}()")
    return found


def _package_reads() -> set[tuple[str, str]]:
    reads = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module not in OWNERS:
            reads |= {(module, what) for what in raw_reads(path.read_text(encoding="utf-8"))}
    return reads


def test_no_module_reads_a_run_file_outside_its_record():
    found = sorted(_package_reads())
    assert not found, ("these modules read a run file's JSON themselves; read its record instead "
                       f"(evidence/records.py: host_of(run), plan_of(run), ...): {found}")


def test_run_dir_offers_records_not_dict_views():
    from openjev_repro.evidence.rundir import RunDir

    assert not [name for name in DICT_VIEWS if hasattr(RunDir, name)]


def test_the_check_catches_every_shape_of_a_planted_read():
    planted = {
        'run.read("host.json")': {"host.json"},
        'RunDir(p).read("backends.json")["backends"]': {"backends.json"},
        'json.loads((path / "state.json").read_text())': {"state.json"},
        'read_json(run.file("plan.json"))': {"plan.json"},
        'with open(directory / "servers.json") as fh: pass': {"servers.json"},
        'read_versioned(root / "import.json", (1,))': {"import.json"},
        'run.effective_state()["status"]': {"effective_state()"},
        'run.state().get("status")': {"state()"},
        '_read(run, "environment.json")': {"environment.json"},
        'RunDir(path.parent).read(path.name)': {"RunDir.read(name)"},
        'run.read(name)': {"RunDir.read(name)"},
    }
    for source, expected in planted.items():
        assert raw_reads(source) == expected, source
    harmless = ['run.file("host.json").is_file()', 'write_json_atomic(run.file("plan.json"), plan.to_json())',
                'host_of(run)', 'open("notes.txt")', 'run.state_record()']
    for source in harmless:
        assert raw_reads(source) == set(), source


def test_a_planted_read_in_a_package_module_fails_the_check(tmp_path, monkeypatch):
    """The package scan itself, not only the parser: a module that reads host.json is named."""
    fake = tmp_path / "openjev_repro"
    (fake / "results").mkdir(parents=True)
    (fake / "results" / "sneaky.py").write_text('def f(run):\n    return run.read("host.json")["device"]\n')
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    assert _package_reads() == {("results/sneaky.py", "host.json")}

"""Nothing outside the owning modules reads a run file's JSON: everyone else gets records.

A run file's JSON is read once, in evidence/ (records.py, state.py, plan.py, rundir.py, files.py:
the edge), and decoded into its record (`records.host_of(run)`, `plan_of(run)`, ...). This test
parses every module of the package and finds each call of a reader (`RunDir.read`,
`read_unversioned`, `read_json`, `read_versioned`, `json.load(s)`, `read_text`, `read_bytes`,
`open`) whose call mentions a run file's name as a literal (`run.read("host.json")`,
`(path / "state.json").read_text()`), and each call of RunDir's dict views (`.state()`,
`.effective_state()`).

TODAY lists the reads that other lanes' modules still make until they merge the records (module,
file or view): the lead shrinks it to empty. A read not listed fails; a listed read that is gone
fails too, so the list only shrinks.
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
DICT_VIEWS = frozenset({"state", "effective_state"})  # RunDir's dicts of state.json

# The edge: the modules that own the run files' records and their one reader.
OWNERS = frozenset({"evidence/records.py", "evidence/state.py", "evidence/plan.py", "evidence/rundir.py",
                    "evidence/files.py",
                    "evidence/summary.py"})  # summary.json's record: lane results

# Reads in modules that have not moved to the records yet (module, run file or dict view): shrink to empty.
TODAY = frozenset({
    ("audit/verify_imported.py", "summary.json"),
    ("audit/verify_signed.py", "RunDir.read(name)"),
    ("audit/verify_signed.py", "summary.json"),
    ("manifest/run_manifest.py", "RunDir.read(name)"),
    ("manifest/run_manifest.py", "state()"),
    ("manifest/run_manifest.py", "summary.json"),
})


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


def test_no_module_reads_a_run_file_outside_its_record_but_todays_list():
    new = sorted(_package_reads() - TODAY)
    assert not new, ("these modules read a run file's JSON themselves; read its record instead "
                     f"(evidence/records.py: host_of(run), plan_of(run), ...): {new}")


def test_todays_list_only_shrinks():
    gone = sorted(TODAY - _package_reads())
    assert not gone, f"no longer read raw (remove them from TODAY): {gone}"


def test_the_lanes_own_packages_read_no_run_file_raw():
    ours = ("study/", "orchestrator/", "host/", "runtime/", "evidence/")
    assert not [r for r in TODAY if r[0].startswith(ours)]


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

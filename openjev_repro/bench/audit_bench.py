"""The audit commands at scale: import, verify, compare, report and publish against `sha256sum`.

For each size factor k, a run is synthesised from a real (demo) run: every timed pass holds
k copies of its cases (copy j > 0 renames case `c` to `c~j` and shifts its seq), with their
rows, response bodies and planned case ids; first-inference and warm-up rows stay as they
are. summary.json, report.md and the plots are recomputed and the run is signed with a
throwaway key, so it has exactly the file formats of a study's run and verifies. From its
measured rows the benchmark also writes evidence in the system1-omni format
(`<arm>-measured-<pass>.jsonl`, summary.json, manifest.json) for `import-evidence`.

Each command runs as `python -m invoke TASK ...` in its own subprocess; its wall time, CPU
time (user + sys) and peak memory (the child's max RSS from wait4, taken in a small launcher
process so the benchmark's own memory does not count) are recorded. Each round first reads
every file once (warm page cache for all sides), then runs `sha256sum` over the same files
just before the commands, so every ratio compares two timings taken side by side under the
same machine load. The result records the load average before and after each size.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ReproError
from ..evidence.files import read_jsonl, write_json_atomic
from ..evidence.recipe import load_recipe
from ..evidence.rundir import ENVELOPE_NAME, RunDir, Status, check_response_entry
from ..hashing import hash_file
from ..manifest.keys import generate_keypair
from ..manifest.statement import write_manifest
from ..results.energy import GPU_FILE, read_gpu_events
from ..results.report import write_report
from ..results.row_table import read_table
from ..results.statistics import summarize
from .machine import describe_disk, gib, result_header, tree_bytes

__all__ = [
    "COMMANDS",
    "default_source",
    "format_audit_table",
    "parse_factors",
    "run_audit_bench",
    "synthesize_run",
    "synthesize_system1",
]

COMMANDS = ("import", "verify", "compare", "report", "publish")
_TIMED_PHASES = ("measured", "feasibility")
_ROOT = Path(__file__).resolve().parents[2]


class AuditBenchError(ReproError):
    """The audit benchmark cannot run as asked."""


def parse_factors(text: str) -> list[int]:
    """'1,10,100' -> [1, 10, 100]."""
    try:
        factors = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        factors = []
    if not factors or any(f < 1 for f in factors):
        raise AuditBenchError(f"--sizes {text!r} is not a comma-separated list of positive factors like 1,10,100.")
    return factors


def default_source(root: Path = _ROOT) -> Path:
    """The newest signed demo run under runs/ (what `make demo` writes)."""
    runs = sorted((p for p in (root / "runs").glob("demo-*") if (p / ENVELOPE_NAME).is_file()),
                  key=lambda p: p.stat().st_mtime)
    if not runs:
        raise AuditBenchError("no signed demo run under runs/; run `make demo` first or pass --source RUN.")
    return runs[-1]


# --- synthesis ---------------------------------------------------------------------------


def _copy_id(case_id: str, j: int) -> str:
    return case_id if j == 0 else f"{case_id}~{j}"


def _pass_lengths(lines: list[dict]) -> dict[tuple, int]:
    lengths: dict[tuple, int] = {}
    for r in lines:
        if r["phase"] in _TIMED_PHASES:
            key = (r["backend"], r["workload"], r["phase"], r["pass_index"])
            lengths[key] = max(lengths.get(key, 0), r["seq"] + 1)
    return lengths


def _replicate(path: Path, out: Path, k: int, lengths: dict[tuple, int], sort_keys: bool) -> None:
    """Write k copies of every timed line of a rows or responses file (one JSON object a line)."""
    with open(path, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        for line in src:
            entry = json.loads(line)
            if entry["phase"] not in _TIMED_PHASES:
                dst.write(line)
                continue
            n = lengths[(entry["backend"], entry["workload"], entry["phase"], entry["pass_index"])]
            for j in range(k):
                copy = dict(entry, id=_copy_id(entry["id"], j), seq=entry["seq"] + j * n)
                dst.write(json.dumps(copy, sort_keys=sort_keys, allow_nan=False) + "\n")


_RECOMPUTED = {ENVELOPE_NAME, "summary.json", "report.md", "latency_vs_tokens.png", "latency_cdf.png", "rows.jsonl"}


def _copy_unchanged(source: Path, out: Path) -> None:
    """Every file of the source run the synthetic run keeps as it is (not rows, responses or outputs)."""
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and rel.as_posix() not in _RECOMPUTED and rel.parts[0] != "responses" \
                and not path.name.startswith("."):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / rel)


def _replicate_case_ids(out: Path, k: int) -> None:
    """plan.json's case ids, k times over, as the replicated rows name them."""
    plan_path = out / "plan.json"
    if not plan_path.is_file():
        return
    plan = RunDir(out).read("plan.json")
    if isinstance(plan.get("case_ids"), dict):
        plan["case_ids"] = {w: [_copy_id(i, j) for j in range(k) for i in ids] for w, ids in plan["case_ids"].items()}
        write_json_atomic(plan_path, plan)


def synthesize_run(source: Path, out: Path, k: int, key: Path) -> Path:
    """A signed run with k times the source run's timed cases, in the source's exact file formats."""
    source, out = Path(source), Path(out)
    if out.exists():
        raise AuditBenchError(f"{out} already exists.")
    if RunDir(source).state_record().status != Status.COMPLETE:
        raise AuditBenchError(f"{source} is not a complete run.")
    _copy_unchanged(source, out)
    rows = [json.loads(line) for line in (source / "rows.jsonl").read_text(encoding="utf-8").splitlines() if line]
    lengths = _pass_lengths(rows)
    _replicate(source / "rows.jsonl", out / "rows.jsonl", k, lengths, sort_keys=True)
    (out / "responses").mkdir(exist_ok=True)
    for path in sorted((source / "responses").glob("*.jsonl")):
        _replicate(path, out / "responses" / path.name, k, lengths, sort_keys=True)
    _replicate_case_ids(out, k)
    # The source's study asked for a signature (or not); this run is signed here, by the benchmark.
    RunDir(out).update_state(signing_requested=False)
    recipe = load_recipe(out / "recipe.yaml")
    gpu = read_gpu_events(out / GPU_FILE) if (out / GPU_FILE).is_file() else None  # energy, as the runner sums it
    write_json_atomic(out / "summary.json", summarize(read_table(out / "rows.jsonl"), recipe, gpu=gpu).to_json())
    write_report(out)
    write_manifest(out, key_path=key)
    return out


def _measured_bodies(run: Path) -> dict[tuple, str]:
    """(backend, pass index, seq) -> the response body of every measured entry that kept one."""
    bodies: dict[tuple, str] = {}
    for path in sorted((run / "responses").glob("*.jsonl")):
        for number, entry in read_jsonl(path, "a response entry"):
            e = check_response_entry(entry, f"{path}:{number}")
            if e["phase"] == "measured" and "body" in e:
                bodies[(e["backend"], e["pass_index"], e["seq"])] = e["body"]
    return bodies


def _system1_line(r: Any, raw: Any) -> str:
    """One row as a system1-omni result line."""
    obj = {"checks": {"correct": r.decision == r.label, "http_ok": r.ok, "schema_ok": True},
           "client_end_monotonic_ns": r.end_ns, "client_start_monotonic_ns": r.start_ns, "id": r.id,
           "latency_s": r.latency_ns / 1e9, "predicted": r.decision, "probability_delta": 0.0,
           "probability_yes": r.probability, "raw": raw}
    return json.dumps(obj, sort_keys=True)


def _pass_stats(p: int, values: list[float]) -> dict[str, Any]:
    s = np.sort(values)
    return {"pass": p, "requests": len(s), "mean_ms": round(float(s.mean()), 3),
            "p50_ms": round(float(np.median(s)), 3), "p95_ms": round(float(s[int(0.95 * len(s)) - 1]), 3)}


def _arm_summary(passes: dict[int, list[float]]) -> dict[str, Any]:
    """One arm of system1-omni's summary.json: per-pass statistics and the aggregate mean."""
    every = np.concatenate([np.asarray(v) for v in passes.values()])
    return {"passes": [_pass_stats(p, values) for p, values in sorted(passes.items())],
            "aggregate_mean_ms": round(float(every.mean()), 3),
            "readiness": {"health": "ready"}, "cleanup": {"exit_code": 0}}


def synthesize_system1(run: Path, out: Path) -> int:
    """The measured rows of a run as system1-omni evidence; returns the number of rows written."""
    run, out = Path(run), Path(out)
    out.mkdir(parents=True)
    bodies = _measured_bodies(run)
    files: dict[str, list[str]] = {}
    latencies: dict[str, dict[int, list[float]]] = {}
    for r in read_table(run / "rows.jsonl").rows():
        if r.phase != "measured":
            continue
        raw = json.loads(bodies[(r.backend, r.pass_index, r.seq)])
        files.setdefault(f"{r.backend}-measured-{r.pass_index}.jsonl", []).append(_system1_line(r, raw))
        latencies.setdefault(r.backend, {}).setdefault(r.pass_index, []).append(r.latency_ms)
    for name, lines in files.items():
        (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    arms = {arm: _arm_summary(passes) for arm, passes in latencies.items()}
    (out / "summary.json").write_text(json.dumps({"arms": arms}, indent=2, sort_keys=True) + "\n")
    listed = sorted(p.name for p in out.iterdir())
    manifest = {"files": [{"path": n, "sha256": hash_file(out / n)} for n in listed]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return sum(len(v) for v in files.values())


# --- timing ------------------------------------------------------------------------------


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).rglob("*") if p.is_file())


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in _files(directory))


# Runs in a small interpreter of its own: a child's max RSS counts the memory of the process it
# was forked from, so the launcher (about 10 MiB) and not this benchmark (numpy, matplotlib) is
# the parent. It times the command and reports its exit code, max RSS and wall time as JSON.
_LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as fh:
    json.dump([os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024, wall, usage.ru_utime + usage.ru_stime], fh)
"""


def _measure(argv: list[str], cwd: Path = _ROOT) -> dict[str, Any]:
    """Wall time and peak RSS (max RSS from wait4, in a small launcher process) of one command."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        proc = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, report.name, *argv], cwd=cwd, check=False,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        code, rss, wall, cpu = json.loads(Path(report.name).read_text() or "[1, 0, 0, 0]")
    if proc.returncode != 0 or code != 0:
        raise AuditBenchError(f"{' '.join(argv[2:5])} … exited {code}: "
                              f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
    return {"seconds": wall, "cpu_seconds": cpu, "max_rss_bytes": rss}


def _invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", *args]


def _round(work: Path, run: Path, src: Path, key_pub: Path, key: Path, tag: str) -> dict[str, dict[str, Any]]:
    """One timed round: each sha256sum floor just before the commands over the same files."""
    out: dict[str, dict[str, Any]] = {}
    for path in [*_files(run), *_files(src)]:  # warm page cache for every side, as in bench-hash
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass
    out["sha256sum_run"] = _measure(["sha256sum", *map(str, _files(run))])
    out["sha256sum_import_source"] = _measure(["sha256sum", *map(str, _files(src))])
    out["startup"] = _measure(_invoke("--help", "verify"))
    out["import"] = _measure(_invoke("import-evidence", "--format", "system1-omni", "--src", str(src),
                                     "--out", str(work / f"imported-{tag}")))
    out["verify"] = _measure(_invoke("verify", "--run", str(run), "--pubkey", str(key_pub)))
    out["compare"] = _measure(_invoke("compare", "--baseline", str(run), "--candidate", str(run)))
    out["report"] = _measure(_invoke("report", "--run", str(run), "--out", str(work / f"report-{tag}")))
    out["publish"] = _measure(_invoke("publish", "--run", str(run), "--aggregate-only", "--key", str(key),
                                      "--out", str(work / f"bundle-{tag}.tar.gz")))
    for leftover in (work / f"imported-{tag}", work / f"report-{tag}"):
        shutil.rmtree(leftover, ignore_errors=True)
    (work / f"bundle-{tag}.tar.gz").unlink(missing_ok=True)
    return out


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("inf")


class _Figures:
    """Per command over the rounds: median, fastest and median CPU seconds, and peak RSS."""

    def __init__(self, rounds: list[dict]) -> None:
        names = list(rounds[0])
        self.med = {name: statistics.median(r[name]["seconds"] for r in rounds) for name in names}
        self.best = {name: min(r[name]["seconds"] for r in rounds) for name in names}
        self.cpu = {name: statistics.median(r[name]["cpu_seconds"] for r in rounds) for name in names}
        self.peak = {name: max(r[name]["max_rss_bytes"] for r in rounds) for name in names}


def _command_result(name: str, rounds: list[dict], f: _Figures, disk: int) -> dict[str, Any]:
    """One command's figures, each beside the sha256sum floor over the same files."""
    floor = "sha256sum_import_source" if name == "import" else "sha256sum_run"
    return {"seconds_median": round(f.med[name], 3), "seconds": [round(r[name]["seconds"], 3) for r in rounds],
            "sha256sum_seconds_median": round(f.med[floor], 3),
            "ratio_to_sha256sum": _ratio(f.med[name], f.med[floor]),
            "ratio_per_round": [_ratio(r[name]["seconds"], r[floor]["seconds"]) for r in rounds],
            "seconds_min": round(f.best[name], 3), "ratio_of_minima": _ratio(f.best[name], f.best[floor]),
            "cpu_seconds_median": round(f.cpu[name], 3), "sha256sum_cpu_seconds_median": round(f.cpu[floor], 3),
            "cpu_ratio_to_sha256sum": _ratio(f.cpu[name], f.cpu[floor]),
            "peak_rss_mib": round(f.peak[name] / 2**20, 1),
            "peak_rss_over_size_on_disk": _ratio(f.peak[name], disk)}


def _size_result(k: int, run: Path, src: Path, rows: int, import_rows: int, rounds: list[dict]) -> dict[str, Any]:
    run_bytes, src_bytes = _size(run), _size(src)
    f = _Figures(rounds)
    commands = {name: _command_result(name, rounds, f, src_bytes if name == "import" else run_bytes)
                for name in COMMANDS}
    commands["publish"]["ratio_to_verify"] = _ratio(f.med["publish"], f.med["verify"])
    commands["publish"]["ratio_to_verify_of_minima"] = _ratio(f.best["publish"], f.best["verify"])
    commands["publish"]["cpu_ratio_to_verify"] = _ratio(f.cpu["publish"], f.cpu["verify"])
    return {"factor": k, "rows": rows, "measured_rows_imported": import_rows, "run_bytes": run_bytes,
            "import_source_bytes": src_bytes, "startup_seconds_median": round(f.med["startup"], 3),
            "startup_peak_rss_mib": round(f.peak["startup"] / 2**20, 1), "commands": commands}


def _quiet(_message: str) -> None:
    """The default progress sink: say nothing (the task passes one that writes to stderr)."""


def _check_bench_inputs(source: Path, rounds: int) -> None:
    if not (source / ENVELOPE_NAME).is_file():
        raise AuditBenchError(f"{source} is not a signed run directory (no {ENVELOPE_NAME}).")
    if shutil.which("sha256sum") is None:
        raise AuditBenchError("sha256sum (coreutils) is not installed; it is the floor every ratio is against.")
    if rounds < 1:
        raise AuditBenchError("--rounds must be at least 1.")


def _work_dir(directory: Path | None) -> Path:
    """A fresh temporary directory for the synthesised runs, under `directory` when one is given."""
    base = Path(directory) if directory else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="bench-audit-", dir=base))


def _one_size(work: Path, source: Path, k: int, keys: tuple[Path, Path], rounds: int,
              say: Callable[[str], None]) -> tuple[dict[str, Any], Path, Path]:
    """Synthesise the run and its import source at factor `k` and time `rounds` rounds over them."""
    public, private = keys
    run = synthesize_run(source, work / f"run-x{k}", k, private)
    src = work / f"system1-x{k}"
    import_rows = synthesize_system1(run, src)
    n_rows = len(read_table(run / "rows.jsonl"))
    load_before = os.getloadavg()[0]
    say(f"size {k}x: {n_rows:,} rows, {gib(tree_bytes(run))}; timing {rounds} round(s) of 5 commands")
    timings = [_round(work, run, src, public, private, f"x{k}-{i}") for i in range(rounds)]
    entry = _size_result(k, run, src, n_rows, import_rows, timings)
    entry["load_average_1m"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    return entry, run, src


def run_audit_bench(factors: list[int], source: Path, directory: Path | None = None, rounds: int = 3,
                    keep: bool = False, say: Callable[[str], None] = _quiet) -> dict[str, Any]:
    source = Path(source)
    _check_bench_inputs(source, rounds)
    result = {**result_header("audit"), "git_commit": _git_commit(), "source_run": str(source), "rounds": rounds,
              "sizes": []}
    work = _work_dir(directory)
    say(f"synthesised runs in {work}, on {describe_disk(work)}" + ("; kept afterwards (--keep)" if keep else
                                                                    "; each removed once measured"))
    try:
        _, public = generate_keypair(work / "key")[:2]
        private = work / "key" / "openjev-repro.key"
        for n, k in enumerate(factors, 1):
            say(f"size {k}x ({n} of {len(factors)}): synthesising the run and its import source")
            entry, run, src = _one_size(work, source, k, (public, private), rounds, say)
            result["sizes"].append(entry)
            if not keep:
                shutil.rmtree(run)
                shutil.rmtree(src)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    result["work_dir"] = str(work) if keep else None
    return result


def _git_commit() -> str | None:
    """The commit of the code measured (with "+dirty" when the work tree differs), or None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def format_audit_table(result: dict[str, Any]) -> str:
    """A Markdown table: per size and command, median time, ratio to sha256sum and peak memory."""
    machine = result["machine"]
    lines = [(f"audit commands vs sha256sum over the same files, median of {result['rounds']} rounds "
              f"({machine['usable_cores']} cores, load average {machine['load_average_1m']} at start)"), "",
             "| size | rows | MB | command | time (s) | sha256sum (s) | ratio | CPU (s) | CPU ratio | peak RSS (MiB) | RSS / size |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in result["sizes"]:
        for name, c in s["commands"].items():
            mb = (s["import_source_bytes"] if name == "import" else s["run_bytes"]) / 1e6
            rows = s["measured_rows_imported"] if name == "import" else s["rows"]
            lines.append(f"| {s['factor']}x | {rows} | {mb:.1f} | {name} | {c['seconds_median']:.3f} | "
                         f"{c['sha256sum_seconds_median']:.3f} | {c['ratio_to_sha256sum']:.2f} | "
                         f"{c['cpu_seconds_median']:.3f} | {c['cpu_ratio_to_sha256sum']:.2f} | "
                         f"{c['peak_rss_mib']:.1f} | {c['peak_rss_over_size_on_disk']:.2f} |")
        p = s["commands"]["publish"]
        lines.append(f"| {s['factor']}x | | | publish / verify | | | {p['ratio_to_verify']:.2f} | | "
                     f"{p['cpu_ratio_to_verify']:.2f} | | |")
        lines.append(f"| {s['factor']}x | | | ratios of the fastest rounds: verify, compare, publish / verify | | | "
                     f"{s['commands']['verify']['ratio_of_minima']:.2f}, {s['commands']['compare']['ratio_of_minima']:.2f}, "
                     f"{p['ratio_to_verify_of_minima']:.2f} | | | | |")
        lines.append(f"| {s['factor']}x | | | start-up (`invoke --help verify`) | {s['startup_seconds_median']:.3f} | | | | | "
                     f"{s['startup_peak_rss_mib']:.1f} | |")
    return "\n".join(lines)

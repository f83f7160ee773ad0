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

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np

from ..errors import ReproError
from ..evidence.decoding import UNSET, UnsetType, decode
from ..evidence.files import read_jsonl, write_json_atomic
from ..evidence.recipe import load_recipe
from ..evidence.records import ResponseEntry, plan_of
from ..evidence.rows import Row, read_rows
from ..evidence.rundir import ENVELOPE_NAME, RunDir, Status, check_response_entry
from ..hashing import hash_file
from ..manifest.attestations import GATES_FOLDER, write_gate_attestations
from ..manifest.keys import generate_keypair
from ..manifest.preregistration import PREREGISTRATION_NAME, TIMESTAMP_NAME, preregister
from ..manifest.run_manifest import write_manifest
from ..results.energy import GPU_FILE, read_gpu_events
from ..results.report import write_report
from ..results.row_table import read_table
from ..results.statistics import summarize
from .machine import BenchResult, describe_disk, gib, tree_bytes

__all__ = [
    "COMMANDS",
    "AuditBenchResult",
    "default_source",
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


Entry = TypeVar("Entry", Row, ResponseEntry)


def _copies(entries: list[Entry], k: int, lengths: dict[tuple[str, str, str, int], int],
            renamed: Callable[..., Entry]) -> Iterator[Entry]:
    """Every entry of a rows or responses file, a timed one k times: copy j > 0 renamed `c~j`, its seq
    shifted by j lengths of its pass."""
    for e in entries:
        if e.phase not in _TIMED_PHASES:
            yield e
            continue
        n = lengths[(e.backend, e.workload, e.phase, e.pass_index)]
        yield from (renamed(e, id=_copy_id(e.id, j), seq=e.seq + j * n) for j in range(k))


def _pass_lengths(rows: list[Row]) -> dict[tuple[str, str, str, int], int]:
    """(backend, workload, phase, pass index) -> the number of requests of each timed pass."""
    lengths: dict[tuple[str, str, str, int], int] = {}
    for r in rows:
        if r.phase in _TIMED_PHASES:
            key = (r.backend, r.workload, r.phase, r.pass_index)
            lengths[key] = max(lengths.get(key, 0), r.seq + 1)
    return lengths


def _responses(path: Path) -> list[ResponseEntry]:
    return [decode(check_response_entry(entry, f"{path}:{number}"), ResponseEntry, f"{path}:{number}")
            for number, entry in read_jsonl(path, "a response entry")]


_RECOMPUTED = {ENVELOPE_NAME, "summary.json", "report.md", "latency_vs_tokens.png", "latency_cdf.png", "rows.jsonl",
               PREREGISTRATION_NAME, TIMESTAMP_NAME}


def _copy_unchanged(source: Path, out: Path) -> None:
    """Every file of the source run the synthetic run keeps as it is (not rows, responses or outputs)."""
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and rel.as_posix() not in _RECOMPUTED and rel.parts[0] not in ("responses", GATES_FOLDER) \
                and not path.name.startswith("."):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / rel)


def synthesize_run(source: Path, out: Path, k: int, key: Path) -> Path:
    """A signed run with k times the source run's timed cases, in the source's exact file formats."""
    source, out = Path(source), Path(out)
    if out.exists():
        raise AuditBenchError(f"{out} already exists.")
    if RunDir(source).state_record().status != Status.COMPLETE:
        raise AuditBenchError(f"{source} is not a complete run.")
    _copy_unchanged(source, out)
    rows = read_rows(source / "rows.jsonl")
    lengths = _pass_lengths(rows)
    (out / "rows.jsonl").write_text("".join(f"{r.to_json()}\n" for r in _copies(rows, k, lengths, dataclasses.replace)),
                                    encoding="utf-8")
    (out / "responses").mkdir(exist_ok=True)
    for path in sorted((source / "responses").glob("*.jsonl")):
        entries = _copies(_responses(path), k, lengths, msgspec.structs.replace)
        (out / "responses" / path.name).write_text("".join(e.line() for e in entries), encoding="utf-8")
    plan = plan_of(RunDir(out))
    if plan is not None and plan.case_ids is not None:  # its case ids, k times over, as the rows name them
        case_ids = {w: [_copy_id(i, j) for j in range(k) for i in ids] for w, ids in plan.case_ids.items()}
        write_json_atomic(out / "plan.json", plan.with_run_facts(case_ids, plan.gpu_override).to_json())
    recipe = load_recipe(out / "recipe.yaml")
    if (source / PREREGISTRATION_NAME).is_file():  # pre-registered again: its case order, by the benchmark's key
        preregister(RunDir(out), recipe, key, None, lambda _: None)
    # The source's study asked for a signature (or not); this run is signed here, by the benchmark.
    RunDir(out).update_state(signing_requested=False)
    gpu = read_gpu_events(out / GPU_FILE) if (out / GPU_FILE).is_file() else None  # energy, as the runner sums it
    write_json_atomic(out / "summary.json", summarize(read_table(out / "rows.jsonl"), recipe, gpu=gpu).to_json())
    write_report(out)
    if (source / GATES_FOLDER).is_dir():  # the gates of this run's summary, attested by the benchmark's key
        write_gate_attestations(out, key)
    write_manifest(out, key_path=key)
    return out


def _system1_line(r: Row, raw: object) -> str:
    """One row as a system1-omni result line."""
    obj = {"checks": {"correct": r.decision == r.label, "http_ok": r.ok, "schema_ok": True},
           "client_end_monotonic_ns": r.end_ns, "client_start_monotonic_ns": r.start_ns, "id": r.id,
           "latency_s": r.latency_ns / 1e9, "predicted": r.decision, "probability_delta": 0.0,
           "probability_yes": r.probability, "raw": raw}
    return json.dumps(obj, sort_keys=True)


def _arm_summary(passes: dict[int, list[float]]) -> dict[str, object]:
    """One arm of system1-omni's summary.json: per-pass statistics and the aggregate mean."""
    every = np.concatenate([np.asarray(v) for v in passes.values()])
    stats = []
    for p, values in sorted(passes.items()):
        s = np.sort(values)
        stats.append({"pass": p, "requests": len(s), "mean_ms": round(float(s.mean()), 3),
                      "p50_ms": round(float(np.median(s)), 3), "p95_ms": round(float(s[int(0.95 * len(s)) - 1]), 3)})
    return {"passes": stats, "aggregate_mean_ms": round(float(every.mean()), 3),
            "readiness": {"health": "ready"}, "cleanup": {"exit_code": 0}}


def synthesize_system1(run: Path, out: Path) -> int:
    """The measured rows of a run's first workload as system1-omni evidence (that layout has one workload, each
    case once per pass); returns the number of rows written."""
    run, out = Path(run), Path(out)
    out.mkdir(parents=True)
    workload = load_recipe(run / "recipe.yaml").workloads[0].name
    bodies = {(e.backend, e.pass_index, e.seq): e.body for path in sorted((run / "responses").glob("*.jsonl"))
              for e in _responses(path) if e.phase == "measured" and e.workload == workload and isinstance(e.body, str)}
    files: dict[str, list[str]] = {}
    latencies: dict[str, dict[int, list[float]]] = {}
    for r in read_table(run / "rows.jsonl").rows():
        if r.phase != "measured" or r.workload != workload:
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


class Timing(msgspec.Struct, frozen=True, kw_only=True):
    """One command's wall time, CPU time (user + sys) and peak memory (the child's max RSS)."""

    seconds: float
    cpu_seconds: float
    max_rss_bytes: int


def _measure(argv: list[str], cwd: Path = _ROOT) -> Timing:
    """Wall time and peak RSS (max RSS from wait4, in a small launcher process) of one command."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        proc = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, report.name, *argv], cwd=cwd, check=False,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        code, rss, wall, cpu = json.loads(Path(report.name).read_text() or "[1, 0, 0, 0]")
    if proc.returncode != 0 or code != 0:
        raise AuditBenchError(f"{' '.join(argv[2:5])} … exited {code}: "
                              f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
    return Timing(seconds=wall, cpu_seconds=cpu, max_rss_bytes=rss)


def _invoke(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", *args]


def _round(work: Path, run: Path, src: Path, key_pub: Path, key: Path, tag: str) -> dict[str, Timing]:
    """One timed round: each sha256sum floor just before the commands over the same files."""
    for path in [*_files(run), *_files(src)]:  # warm page cache for every side, as in bench-hash
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass
    out = {"sha256sum_run": _measure(["sha256sum", *map(str, _files(run))]),
           "sha256sum_import_source": _measure(["sha256sum", *map(str, _files(src))]),
           "startup": _measure(_invoke("--help", "verify")),
           "import": _measure(_invoke("import-evidence", "--format", "system1-omni", "--src", str(src),
                                      "--out", str(work / f"imported-{tag}"))),
           "verify": _measure(_invoke("verify", "--run", str(run), "--pubkey", str(key_pub))),
           "compare": _measure(_invoke("compare", "--baseline", str(run), "--candidate", str(run))),
           "report": _measure(_invoke("report", "--run", str(run), "--out", str(work / f"report-{tag}"))),
           "publish": _measure(_invoke("publish", "--run", str(run), "--aggregate-only", "--key", str(key),
                                       "--out", str(work / f"bundle-{tag}.tar.gz")))}
    for leftover in (work / f"imported-{tag}", work / f"report-{tag}"):
        shutil.rmtree(leftover, ignore_errors=True)
    (work / f"bundle-{tag}.tar.gz").unlink(missing_ok=True)
    return out


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("inf")


@dataclass(frozen=True)
class _Series:
    """One command over the rounds: median, fastest and median CPU seconds, and peak RSS."""

    timings: list[Timing]

    @property
    def seconds(self) -> list[float]:
        return [t.seconds for t in self.timings]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def cpu(self) -> float:
        return statistics.median(t.cpu_seconds for t in self.timings)

    @property
    def peak(self) -> int:
        return max(t.max_rss_bytes for t in self.timings)


class CommandResult(msgspec.Struct, frozen=True, kw_only=True):
    """One command's figures at one size, each beside the sha256sum floor over the same files (publish also
    beside verify)."""

    seconds_median: float
    seconds: list[float]
    sha256sum_seconds_median: float
    ratio_to_sha256sum: float
    ratio_per_round: list[float]
    seconds_min: float
    ratio_of_minima: float
    cpu_seconds_median: float
    sha256sum_cpu_seconds_median: float
    cpu_ratio_to_sha256sum: float
    peak_rss_mib: float
    peak_rss_over_size_on_disk: float
    ratio_to_verify: float | UnsetType = UNSET
    ratio_to_verify_of_minima: float | UnsetType = UNSET
    cpu_ratio_to_verify: float | UnsetType = UNSET

    @classmethod
    def of(cls, own: _Series, floor: _Series, disk: int, verify: _Series | None = None) -> CommandResult:
        beside = {} if verify is None else {
            "ratio_to_verify": _ratio(own.median, verify.median),
            "ratio_to_verify_of_minima": _ratio(own.best, verify.best),
            "cpu_ratio_to_verify": _ratio(own.cpu, verify.cpu)}
        return cls(seconds_median=round(own.median, 3), seconds=[round(t, 3) for t in own.seconds],
                   sha256sum_seconds_median=round(floor.median, 3), ratio_to_sha256sum=_ratio(own.median, floor.median),
                   ratio_per_round=[_ratio(a, b) for a, b in zip(own.seconds, floor.seconds, strict=True)],
                   seconds_min=round(own.best, 3), ratio_of_minima=_ratio(own.best, floor.best),
                   cpu_seconds_median=round(own.cpu, 3), sha256sum_cpu_seconds_median=round(floor.cpu, 3),
                   cpu_ratio_to_sha256sum=_ratio(own.cpu, floor.cpu), peak_rss_mib=round(own.peak / 2**20, 1),
                   peak_rss_over_size_on_disk=_ratio(own.peak, disk), **beside)


class LoadAverage(msgspec.Struct, frozen=True, kw_only=True):
    before: float
    after: float


class SizeResult(msgspec.Struct, frozen=True, kw_only=True):
    """Every command timed over a run of `factor` times the source and its import source."""

    factor: int
    rows: int
    measured_rows_imported: int
    run_bytes: int
    import_source_bytes: int
    startup_seconds_median: float
    startup_peak_rss_mib: float
    commands: dict[str, CommandResult]
    load_average_1m: LoadAverage

    def table_lines(self) -> list[str]:
        """Its rows of the Markdown table: one per command, then publish / verify, the fastest rounds' ratios
        and start-up."""
        lines = []
        for name, c in self.commands.items():
            mb = (self.import_source_bytes if name == "import" else self.run_bytes) / 1e6
            rows = self.measured_rows_imported if name == "import" else self.rows
            lines.append(f"| {self.factor}x | {rows} | {mb:.1f} | {name} | {c.seconds_median:.3f} | "
                         f"{c.sha256sum_seconds_median:.3f} | {c.ratio_to_sha256sum:.2f} | "
                         f"{c.cpu_seconds_median:.3f} | {c.cpu_ratio_to_sha256sum:.2f} | "
                         f"{c.peak_rss_mib:.1f} | {c.peak_rss_over_size_on_disk:.2f} |")
        verify, compare, publish = (self.commands[name] for name in ("verify", "compare", "publish"))
        lines.append(f"| {self.factor}x | | | publish / verify | | | {publish.ratio_to_verify:.2f} | | "
                     f"{publish.cpu_ratio_to_verify:.2f} | | |")
        lines.append(f"| {self.factor}x | | | ratios of the fastest rounds: verify, compare, publish / verify | | | "
                     f"{verify.ratio_of_minima:.2f}, {compare.ratio_of_minima:.2f}, "
                     f"{publish.ratio_to_verify_of_minima:.2f} | | | | |")
        lines.append(f"| {self.factor}x | | | start-up (`invoke --help verify`) | {self.startup_seconds_median:.3f} | "
                     f"| | | | {self.startup_peak_rss_mib:.1f} | |")
        return lines


class AuditBenchResult(BenchResult, frozen=True, kw_only=True):
    """bench-results/audit.json."""

    git_commit: str | None
    source_run: str
    rounds: int
    sizes: list[SizeResult]
    work_dir: str | None  # where the synthesised runs were kept (--keep)

    def markdown(self) -> str:
        """A Markdown table: per size and command, median time, ratio to sha256sum and peak memory."""
        lines = [(f"audit commands vs sha256sum over the same files, median of {self.rounds} rounds "
                  f"({self.machine.usable_cores} cores, load average {self.machine.load_average_1m} at start)"), "",
                 "| size | rows | MB | command | time (s) | sha256sum (s) | ratio | CPU (s) | CPU ratio | peak RSS (MiB) | RSS / size |",
                 "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        return "\n".join(lines + [line for s in self.sizes for line in s.table_lines()])


def _quiet(_message: str) -> None:
    """The default progress sink: say nothing (the task passes one that writes to stderr)."""


def _work_dir(directory: Path | None) -> Path:
    """A fresh temporary directory for the synthesised runs, under `directory` when one is given."""
    base = Path(directory) if directory else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="bench-audit-", dir=base))


def _one_size(work: Path, source: Path, k: int, keys: tuple[Path, Path], rounds: int,
              say: Callable[[str], None]) -> tuple[SizeResult, Path, Path]:
    """Synthesise the run and its import source at factor `k` and time `rounds` rounds over them."""
    public, private = keys
    run = synthesize_run(source, work / f"run-x{k}", k, private)
    src = work / f"system1-x{k}"
    import_rows = synthesize_system1(run, src)
    n_rows = len(read_table(run / "rows.jsonl"))
    load_before = os.getloadavg()[0]
    say(f"size {k}x: {n_rows:,} rows, {gib(tree_bytes(run))}; timing {rounds} round(s) of 5 commands")
    timings = [_round(work, run, src, public, private, f"x{k}-{i}") for i in range(rounds)]
    series = {name: _Series([r[name] for r in timings]) for name in timings[0]}
    run_bytes, src_bytes = tree_bytes(run), tree_bytes(src)
    commands = {name: CommandResult.of(series[name], series["sha256sum_import_source" if name == "import" else
                                                            "sha256sum_run"],
                                       src_bytes if name == "import" else run_bytes,
                                       verify=series["verify"] if name == "publish" else None)
                for name in COMMANDS}
    entry = SizeResult(factor=k, rows=n_rows, measured_rows_imported=import_rows, run_bytes=run_bytes,
                       import_source_bytes=src_bytes, startup_seconds_median=round(series["startup"].median, 3),
                       startup_peak_rss_mib=round(series["startup"].peak / 2**20, 1), commands=commands,
                       load_average_1m=LoadAverage(before=round(load_before, 2), after=round(os.getloadavg()[0], 2)))
    return entry, run, src


def run_audit_bench(factors: list[int], source: Path, directory: Path | None = None, rounds: int = 3,
                    keep: bool = False, say: Callable[[str], None] = _quiet) -> AuditBenchResult:
    source = Path(source)
    if not (source / ENVELOPE_NAME).is_file():
        raise AuditBenchError(f"{source} is not a signed run directory (no {ENVELOPE_NAME}).")
    if shutil.which("sha256sum") is None:
        raise AuditBenchError("sha256sum (coreutils) is not installed; it is the floor every ratio is against.")
    if rounds < 1:
        raise AuditBenchError("--rounds must be at least 1.")
    header = BenchResult.header("audit")
    if directory is not None:  # a fresh temporary directory for the synthesised runs, under `directory`
        Path(directory).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-audit-", dir=directory))
    say(f"synthesised runs in {work}, on {describe_disk(work)}" + ("; kept afterwards (--keep)" if keep else
                                                                    "; each removed once measured"))
    sizes = []
    try:
        _, public = generate_keypair(work / "key")[:2]
        private = work / "key" / "openjev-repro.key"
        for n, k in enumerate(factors, 1):
            say(f"size {k}x ({n} of {len(factors)}): synthesising the run and its import source")
            entry, run, src = _one_size(work, source, k, (public, private), rounds, say)
            sizes.append(entry)
            if not keep:
                shutil.rmtree(run)
                shutil.rmtree(src)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return AuditBenchResult(**header, git_commit=_git_commit(), source_run=str(source), rounds=rounds, sizes=sizes,
                            work_dir=str(work) if keep else None)


def _git_commit() -> str | None:
    """The commit of the code measured (with "+dirty" when the work tree differs), or None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")

"""`invoke collect`: verify every replicate, compare each with the baseline, report per backend
across hosts, and write a signed summary (summary.md, summary.json, means.png, summary.dsse.json)
into a new `collect-<UTC time>/` directory of the submission."""

from __future__ import annotations

import hashlib
import io
import json
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ..audit.bundle import opened
from ..audit.compare import COMPARABLE_STATUSES, RunComparison, compare_runs, run_status
from ..audit.verify import verify_path
from ..errors import EvidenceError, RunIncomplete, VerificationError
from ..evidence.files import atomic_directory
from ..evidence.recipe import Recipe, parse_recipe
from ..evidence.records import HostPart, SlurmPart, environment_of, host_of
from ..evidence.rows import read_rows
from ..evidence.rundir import ENVELOPE_NAME, RunDir
from ..hashing import hash_file
from ..manifest.dsse import (
    envelope_bytes,
    make_envelope,
    parse_envelope,
    payload_of,
    verify_envelope,
)
from ..manifest.keys import keyid, load_private_key, load_public_key, trusted_public_key
from ..printable import printable
from .crosshost import BackendReport, HostRun, backend_report, host_means, load_cross_host_tolerances
from .submission import Submission

__all__ = [
    "COLLECT_FORMAT_VERSION",
    "SUMMARY_FILES",
    "SUMMARY_PREDICATE_TYPE",
    "Collected",
    "SignedCollection",
    "collect",
    "verify_summary",
]

COLLECT_FORMAT_VERSION = 1
SUMMARY_PREDICATE_TYPE = "https://openjev-repro.dev/cross-host-summary/v1"
SUMMARY_FILES = ("summary.json", "summary.md", "means.png")
SUMMARY_ENVELOPE = "summary.dsse.json"


class Baseline(msgspec.Struct, frozen=True, kw_only=True):
    label: str
    path: str
    host: str


class Replicate(msgspec.Struct, frozen=True, kw_only=True):
    label: str
    host: str
    run: str
    manifest_sha256: str
    verified: bool


class CollectTolerances(msgspec.Struct, frozen=True, kw_only=True):
    """The limits a collection applied: the tolerances file, compare's limits and the cross-host ones."""

    file: str | None
    compare: dict[str, Any]  # compare's own limits (audit/compare.py), as it checked them
    cross_host: dict[str, float]


class CollectVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """A collection's PASS/FAIL over every replicate and backend (summary.json `verdict`)."""

    passed: bool | None  # None: no limits declared
    failures: list[str]
    note: str | None = None

    @property
    def word(self) -> str:
        return {True: "PASS", False: "FAIL", None: "no limits declared"}[self.passed]


class CrossHostSummary(msgspec.Struct, frozen=True, kw_only=True):
    """summary.json of a collection (`invoke collect`), written by `to_json`, read back by `decode`."""

    format_version: int
    submission: str
    study: str
    created_utc: str
    baseline: Baseline
    replicates: list[Replicate]
    tolerances: CollectTolerances
    backends: list[BackendReport]
    verdict: CollectVerdict

    @classmethod
    def decode(cls, data: object, where: str = "summary.json") -> CrossHostSummary:
        try:
            return msgspec.convert(data, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise EvidenceError(f"{where}: not a cross-host summary ({exc}).") from None

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    def one_host(self) -> str | None:
        """The host's name when every run (replicates and baseline) ran on the same one: nothing is cross-host."""
        hosts = {h.host for b in self.backends for h in b.hosts} | {self.baseline.host}
        return next(iter(hosts)) if len(hosts) == 1 else None


@dataclass(frozen=True)
class Collected:
    path: Path
    summary: CrossHostSummary

    @property
    def passed(self) -> bool | None:
        return self.summary.verdict.passed


def _host_of(run: Path) -> str:
    """The Slurm node the run ran on (host.json), else the environment's hostname."""
    host = host_of(RunDir(run))
    if host is not None and isinstance(host.slurm, SlurmPart) and host.slurm.node:
        return host.slurm.node
    env = environment_of(RunDir(run)).host
    return env.hostname if isinstance(env, HostPart) and isinstance(env.hostname, str) and env.hostname else "unknown"


def _verified(label: str, path: Path, pubkey: Path) -> None:
    failed = [c for c in verify_path(path, pubkey=pubkey) if c.passed is False]
    if failed:
        detail = "; ".join(f"{c.name}: {c.detail.rstrip('.')}" for c in failed[:3])
        raise VerificationError(f"{label} ({path}) does not verify: {detail}.")


def _load(label: str, path: Path, host: str | None = None) -> tuple[HostRun, Any]:
    with opened(path) as directory:
        directory = Path(directory)
        recipe = parse_recipe((directory / "recipe.yaml").read_text(encoding="utf-8"), str(directory / "recipe.yaml"))
        return HostRun(label, host or _host_of(directory), Path(path), read_rows(directory / "rows.jsonl")), recipe


def _signing_key(sub: Submission, key: Path | None, pubkey: Path) -> Any:
    """--key, or the key submit was given, but only when it is the private half of the trusted --pubkey
    (the path in submission.json is the submission's word, not the user's)."""
    if key is not None:
        return load_private_key(key)
    private = load_private_key(Path(sub.record.text("key")))
    if keyid(private.public_key()) != keyid(load_public_key(pubkey)):
        raise VerificationError(f"the key named in {sub.path / 'submission.json'} is not the private half of "
                                f"--pubkey {pubkey}; give the key that signs the summary with --key.")
    return private


def _complete_runs(sub: Submission) -> list[tuple[str, Path]]:
    """(label, run directory) of every replicate's complete run; EvidenceError naming one that has none."""
    runs: list[tuple[str, Path]] = []
    for k in sub.replicates:
        complete = sub.complete_run(k)
        if complete is None:
            states = ", ".join(f"{r.path.name}: {r.status}" for r in sub.runs(k)) or "no run"
            raise EvidenceError(f"replicate {k} has no complete run ({states}); resubmit it with "
                                f"`invoke submit --resume {sub.path}` and collect when it is complete.")
        runs.append((f"replicate-{k}", complete.path))
    return runs


def _baseline_run(baseline: Path, pubkey: Path) -> HostRun:
    """Another study's complete, verified run as the baseline of every replicate."""
    with opened(baseline) as directory:  # as compare refuses it, before asking for a signature it cannot have
        status = run_status(Path(directory), baseline)
    if status not in COMPARABLE_STATUSES:
        raise RunIncomplete(f"the baseline {baseline} is not a complete run (status {status!r}); "
                            "compare every replicate with a complete one.")
    _verified("the baseline", baseline, pubkey)
    return _load("baseline", baseline)[0]


def _verified_replicates(sub: Submission, pubkey: Path) -> tuple[list[HostRun], list[Recipe]]:
    """Every replicate's complete run, verified against `pubkey`, loaded with its recipe."""
    runs = _complete_runs(sub)
    for label, path in runs:
        _verified(label, path, pubkey)
    loaded = [_load(label, path) for label, path in runs]
    return [host for host, _ in loaded], [recipe for _, recipe in loaded]


def _sides(hosts: list[HostRun], baseline: Path | None,
           baseline_pubkey: Path) -> tuple[HostRun, str, list[HostRun], list[HostRun]]:
    """(the baseline run, its label, the runs compared with it, every run): another study's run when
    given, else the first replicate."""
    if baseline is not None:
        base = _baseline_run(baseline, baseline_pubkey)
        return base, "baseline", hosts, [base, *hosts]
    return hosts[0], hosts[0].label, hosts[1:], hosts


def _reports(recipe: Recipe, base: HostRun, others: list[HostRun], everyone: list[HostRun],
             compare_tol: dict[str, Any], cross_tol: dict[str, float]) -> tuple[dict[str, RunComparison], list[BackendReport]]:
    """Each other run compared with the baseline, and a cross-host report per (workload, backend)."""
    # `invoke compare`'s own code, on the run directories (it reads rows, recipe and backends.json).
    comparisons = {run.label: compare_runs(base.path, run.path, tolerances=compare_tol or None) for run in others}
    means = {run.label: host_means(run.rows) for run in everyone}
    order = [(w.name, b.name) for w in recipe.workloads for b in recipe.backends]
    return comparisons, [backend_report(w, b, everyone, means, comparisons, cross_tol) for w, b in order]


def collect(submission: Path, *, pubkey: Path | None = None, tolerances: Path | None = None,
            baseline: Path | None = None, baseline_pubkey: Path | None = None, key: Path | None = None) -> Collected:
    """Every replicate is verified against `pubkey`, the user's trust anchor (required; never a key
    inside the submission); a baseline against `baseline_pubkey` (default `pubkey`)."""
    sub = Submission.open(submission)
    pubkey = trusted_public_key(pubkey, sub.path)
    baseline_pubkey = trusted_public_key(baseline_pubkey or pubkey, sub.path, *([baseline] if baseline else []),
                                         option="--baseline-pubkey")
    compare_tol, cross_tol = load_cross_host_tolerances(tolerances) if tolerances else ({}, {})
    signing_key = _signing_key(sub, key, pubkey)
    hosts, recipes = _verified_replicates(sub, pubkey)
    base, base_label, others, everyone = _sides(hosts, baseline, baseline_pubkey)
    comparisons, backends = _reports(recipes[0], base, others, everyone, compare_tol, cross_tol)
    summary = CrossHostSummary(
        format_version=COLLECT_FORMAT_VERSION, submission=sub.id, study=recipes[0].study.id,
        created_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        baseline=Baseline(label=base_label, path=str(base.path), host=base.host),
        replicates=[Replicate(label=h.label, host=h.host, run=str(h.path),
                              manifest_sha256=hash_file(h.path / ENVELOPE_NAME), verified=True) for h in hosts],
        tolerances=CollectTolerances(file=str(tolerances) if tolerances else None, compare=compare_tol,
                                     cross_host=cross_tol),
        backends=backends, verdict=_verdict(comparisons, backends, declared=bool(compare_tol or cross_tol)))
    return Collected(_write(sub, summary, signing_key), summary)


def _verdict(comparisons: dict[str, RunComparison], backends: list[BackendReport], *, declared: bool) -> CollectVerdict:
    """Every limit crossed (compare's, per replicate, then the cross-host ones); no verdict without limits."""
    failures = [f"{label}: {f}" for label, comparison in comparisons.items() for f in comparison.verdict.failures]
    failures += [f for b in backends for f in b.cross_host_failures]
    return CollectVerdict(passed=False if failures else (True if declared else None), failures=failures,
                   note=None if declared else "no limits declared")


def _write(sub: Submission, summary: CrossHostSummary, key: Any) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = sub.path / f"collect-{stamp}"
    n = 1
    while out.exists():  # never overwrite an earlier collection
        n += 1
        out = sub.path / f"collect-{stamp}-{n}"
    files = {"summary.json": (json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n").encode(),
             "summary.md": to_markdown(summary).encode(), "means.png": plot_means(summary)}
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": n, "digest": {"sha256": hashlib.sha256(d).hexdigest()}} for n, d in files.items()],
                 "predicateType": SUMMARY_PREDICATE_TYPE,
                 "predicate": {"submission": summary.submission, "replicates": msgspec.to_builtins(summary.replicates),
                               "verdict": msgspec.to_builtins(summary.verdict)}}
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    files[SUMMARY_ENVELOPE] = envelope_bytes(make_envelope(payload, key))
    with atomic_directory(out) as tmp:  # the collection appears whole or not at all, no temp left behind
        for name, data in files.items():
            (tmp / name).write_bytes(data)
    return out


def _inside(directory: Path, name: str) -> Path:
    """`directory/name`, refused unless it is a regular file of the directory itself (a symbolic link
    could point out of it: what it names was never signed as part of this collection)."""
    path = Path(directory) / name
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        raise VerificationError(f"{printable(str(path))} is missing.") from None
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise VerificationError(f"{printable(str(path))} is {kind}; a collection holds only its own regular files.")
    return path


@dataclass(frozen=True)
class SignedCollection:
    """A collection whose signature and file digests checked out: who signed it and which files it signed."""

    keyid: str
    files: list[str]


def verify_summary(directory: Path, pubkey: Path) -> SignedCollection:
    """Check a collection's signature and the digest of each of its files."""
    trusted_public_key(pubkey, Path(directory).parent)  # never a key inside the submission it belongs to
    envelope = parse_envelope(_inside(directory, SUMMARY_ENVELOPE).read_bytes(), SUMMARY_ENVELOPE)
    signer = verify_envelope(envelope, load_public_key(pubkey))
    try:
        statement = msgspec.json.decode(payload_of(envelope), type=_SummaryStatement)
    except msgspec.DecodeError:
        statement = _SummaryStatement()
    if statement.predicate_type != SUMMARY_PREDICATE_TYPE:
        raise VerificationError(f"{directory}: not a cross-host summary envelope.")
    subjects = statement.subjects(directory)
    for subject in subjects:
        if hash_file(_inside(directory, subject.name)) != subject.digest.sha256:
            raise VerificationError(f"{directory}/{subject.name} changed after it was signed.")
    return SignedCollection(keyid=signer, files=[s.name for s in subjects])


class _Digest(msgspec.Struct, frozen=True):
    sha256: str


class _Subject(msgspec.Struct, frozen=True):
    name: str
    digest: _Digest


class _SummaryStatement(msgspec.Struct, frozen=True, rename={"predicate_type": "predicateType"}):
    """The signed statement of a collection, as far as verifying it reads: its kind and its subjects
    (decoded once the kind is known)."""

    predicate_type: str | None = None
    subject: msgspec.Raw = msgspec.Raw(b"null")

    def subjects(self, directory: Path) -> list[_Subject]:
        """Each signed file; a subject of another shape, or naming a path, is damaged evidence."""
        try:
            subjects = msgspec.json.decode(self.subject, type=list[_Subject])
        except msgspec.DecodeError as exc:
            damage: str | None = printable(str(exc))
        else:
            damage = next((repr(s.name)[:80] for s in subjects
                           if Path(s.name).name != s.name or s.name in ("", ".", "..")), None if subjects else "[]")
        if damage is not None:
            raise EvidenceError(f"{directory}: the signed summary's subject {damage} is not "
                                "{name: a file of this directory, digest: {sha256}}.")
        return subjects


def to_markdown(summary: CrossHostSummary) -> str:
    from ..results.report import rounded_text  # numbers for people: summary.json keeps every digit

    one_host = summary.one_host()
    title = f"Replicate report, all on the same host {one_host}" if one_host else "Cross-host report"
    lines = [f"# {title}: {summary.study}", "",
             (f"Submission `{summary.submission}`, {len(summary.replicates)} replicates, every one verified "
              f"(signature, digests, statistics recomputed). Baseline: {summary.baseline.label} "
              f"on {summary.baseline.host}."), "", f"**Verdict: {summary.verdict.word}**", ""]
    for b in summary.backends:
        lines += b.section(rounded_text)
    if summary.verdict.failures:
        lines += ["## Tolerance failures", "", *(f"- {rounded_text(f)}" for f in summary.verdict.failures), ""]
    lines += [("Means are over every measured request of a run; the pass range is the lowest and highest "
              "measured pass mean. Relative range = (max - min) / mean of the per-host means; coefficient of "
              "variation = sample standard deviation / mean of the per-host means."), ""]
    return "\n".join(lines)


def _hardware(summary: CrossHostSummary) -> str:
    """What the replicates ran on, from their environment.json: GPU names, else the CPU model."""
    names = [name for replicate in summary.replicates for name in _hardware_of(Path(replicate.run))]
    return ", ".join(dict.fromkeys(names)) or "hardware not recorded"


def _hardware_of(run: Path) -> list[str]:
    try:
        env = environment_of(RunDir(run))
    except EvidenceError:
        return []
    cpu = env.cpu_model
    return [d.name for d in env.gpu_devices if d.name] or ([f"CPU only ({cpu})"] if cpu else [])


def plot_means(summary: CrossHostSummary) -> bytes:
    """One PNG: each host's mean per backend, with its measured pass means range as an error bar."""
    buf = io.BytesIO()
    means_figure(summary).savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _label_points(groups: list[BackendReport], label: str, i: int,
                  width: float) -> tuple[list[float], list[float], list[float], list[float], str]:
    """One run's points, the `i`-th of each group: x, mean, the pass range below and above it, its host."""
    xs: list[float] = []
    ys: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    host = ""
    for g, b in enumerate(groups):
        for h in b.hosts:
            if h.label == label:
                host = h.host
                xs.append(g - 0.4 + width * (i + 0.5))
                ys.append(h.mean_ms)
                lo.append(h.mean_ms - h.pass_range_ms[0])
                hi.append(h.pass_range_ms[1] - h.mean_ms)
    return xs, ys, lo, hi, host


def means_figure(summary: CrossHostSummary) -> Any:
    """The matplotlib Figure behind means.png (Agg canvas, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = summary.backends
    labels = sorted({h.label for b in groups for h in b.hosts}, key=lambda x: (x != "baseline", len(x), x))
    fig = Figure(figsize=(max(6.0, 2.2 * len(groups) + 2), 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        xs, ys, lo, hi, host = _label_points(groups, label, i, width)
        marker = "D" if label in ("baseline", summary.baseline.label) else "o"
        role = ", baseline" if marker == "D" and label != "baseline" else ""
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marker, capsize=4, label=f"{label} ({host}{role})")
    ax.set_xticks(range(len(groups)), [f"{b.workload}\n{b.backend}" for b in groups])
    one_host = summary.one_host()
    what = f"Replicate means, all on one host ({one_host})" if one_host else "Per-host means"
    ax.set(ylabel="mean latency (ms); error bar: measured pass range")
    ax.set_ylim(0, 1.12 * ax.get_ylim()[1])  # the heights are compared: from zero, with room for the legend
    fig.suptitle(f"{what}\nstudy {summary.study} · {_hardware(summary)} · "
                 f"collected {summary.created_utc[:10]}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    return fig

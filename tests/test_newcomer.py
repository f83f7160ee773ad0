"""What a new user stumbled on (issue 27), each held by a test: tolerances files that the
commands accept, a collect summary that `invoke verify` checks, UNSIGNED wording, rounding,
exit codes for failed gates, hints. Real subprocesses of `invoke` where the command is the point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.audit.compare import load_tolerances
from openjev_repro.cluster.crosshost import load_cross_host_tolerances
from openjev_repro.errors import RecipeError

REPO = Path(__file__).resolve().parents[1]
TOLERANCES = REPO / "manifests" / "tolerances"


def invoke(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL, check=False)


def test_the_demo_ships_a_tolerances_file_compare_accepts_and_collect_has_the_same_limits_plus_cross_host():
    compare_limits = load_tolerances(TOLERANCES / "demo.yaml")
    collect_limits, cross_host = load_cross_host_tolerances(TOLERANCES / "demo-cross-host.yaml")
    assert collect_limits == compare_limits.to_json() and cross_host
    with pytest.raises(RecipeError, match=r"cross_host is `invoke collect`'s section.*manifests/tolerances/demo.yaml"):
        load_tolerances(TOLERANCES / "demo-cross-host.yaml")


@pytest.fixture(scope="module")
def gated_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """An UNSIGNED study of two scripted backends whose one gate (99% faster) FAILS, run with --fail-on-gates."""
    from studykit import scripted_backend, write_study

    tmp = tmp_path_factory.mktemp("gated")
    gate = {"name": "much-faster", "kind": "mean_reduction", "workload": "mixed", "baseline": "one",
            "candidate": "two", "min_percent": 99.0}
    recipe = write_study(tmp, [scripted_backend("one"), scripted_backend("two")], gates=[gate])
    done = invoke("study", "--recipe", str(recipe), "--out", str(tmp / "runs"), "--fail-on-gates")
    return next((tmp / "runs").iterdir()), done


def test_a_failed_gate_fails_study_report_and_verify_when_asked(gated_run, tmp_path):
    run, study = gated_run
    assert study.returncode == 3, study.stderr
    assert study.stdout.splitlines()[-1] == str(run)  # the run directory is still the last line
    assert study.stderr.strip().splitlines()[-1].startswith("error: 1 of 1 gates FAILED in ") and "much-faster" in study.stderr
    report = invoke("report", "--run", str(run), "--out", str(tmp_path / "report"), "--fail-on-gates")
    assert report.returncode == 3 and "| much-faster | mean_reduction | FAILED |" in report.stdout, report.stderr
    assert invoke("report", "--run", str(run), "--out", str(tmp_path / "again")).returncode == 0  # only when asked
    verify = invoke("verify", "--run", str(run), "--allow-unsigned", "--fail-on-gates")
    assert verify.returncode == 3 and "much-faster" in verify.stderr, verify.stdout + verify.stderr
    assert invoke("verify", "--run", str(run), "--allow-unsigned").returncode == 0


def test_an_unsigned_run_is_never_pass_signature(gated_run):
    run, _ = gated_run
    done = invoke("verify", "--run", str(run), "--allow-unsigned")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert any(line.startswith("UNSIGNED  signature") for line in lines), lines
    assert not [line for line in lines if line.startswith("PASS") and "signature" in line], lines
    assert not [line for line in lines if " signed" in line.replace("UNSIGNED", "")], lines
    assert lines[-1].startswith("VERIFIED, UNSIGNED"), lines[-1]


def _collect_dir(tmp: Path) -> tuple[Path, Path]:
    """A collect directory as `invoke collect` writes it: three files and their signed Statement."""
    import hashlib
    import json

    from openjev_repro.cluster.collect import SUMMARY_ENVELOPE, SUMMARY_PREDICATE_TYPE
    from openjev_repro.manifest.dsse import envelope_bytes, make_envelope
    from openjev_repro.manifest.keys import generate_keypair, load_private_key

    private, public, _ = generate_keypair(tmp / "keys")
    out = tmp / "sub" / "collect-20261201T000000Z"
    out.mkdir(parents=True)
    files = {"summary.json": b"{}\n", "summary.md": b"# Cross-host report\n", "means.png": b"\x89PNG"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    statement = {"_type": "https://in-toto.io/Statement/v1", "predicateType": SUMMARY_PREDICATE_TYPE,
                 "subject": [{"name": n, "digest": {"sha256": hashlib.sha256(d).hexdigest()}} for n, d in files.items()],
                 "predicate": {}}
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    (out / SUMMARY_ENVELOPE).write_bytes(envelope_bytes(make_envelope(payload, load_private_key(private))))
    return out, public


def test_verify_checks_a_collect_summary(tmp_path):
    collection, public = _collect_dir(tmp_path)
    done = invoke("verify", "--run", str(collection), "--pubkey", str(public))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("PASS  collection signature")
    assert done.stdout.strip().endswith("VERIFIED: 0 of 3 checks failed.")
    bare = invoke("verify", "--run", str(collection))
    assert bare.returncode == 1 and "pass --pubkey" in bare.stderr and "invoke sign" not in bare.stderr
    (collection / "summary.md").write_text("# edited\n")
    tampered = invoke("verify", "--run", str(collection), "--pubkey", str(public))
    assert tampered.returncode == 1 and tampered.stdout.startswith("FAIL") and "changed after it was signed" in tampered.stdout
    for folder in (collection.parent, tmp_path / "keys"):  # a submission, any folder: no "sign it first"
        other = invoke("verify", "--run", str(folder), "--pubkey", str(public))
        assert other.returncode == 1 and "invoke sign" not in other.stderr, other.stderr
        assert other.stderr.startswith("error: ") and "no run directory, bundle or collect directory" in other.stderr


def test_submit_with_slurm_down_points_at_the_local_cluster_script(tmp_path):
    """A stand-in sbatch (tests only) answers as Slurm 22.05 does when slurmctld is down."""
    from openjev_repro.manifest.keys import generate_keypair

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Unable to contact slurm "
                    "controller (connect failure)' >&2\nexit 1\n")
    fake.chmod(0o755)
    private, _, _ = generate_keypair(tmp_path / "key")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "invoke", "submit", "--recipe", "recipes/demo.yaml", "--replicates",
                           "1", "--key", str(private), "--out", str(tmp_path / "subs")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Unable to contact slurm controller" in lines[0], lines
    assert lines[0].endswith("scripts/slurm-local.sh start)"), lines
    assert not (tmp_path / "subs").exists() or not list((tmp_path / "subs").iterdir())  # no half submission left


def _summary(tmp: Path, hosts: tuple[str, str]) -> dict:
    """A collection's summary.json as `invoke collect` writes it, two hosts."""
    run = tmp / "run"
    run.mkdir(exist_ok=True)
    (run / "environment.json").write_text('{"format_version": 2, "host": {"available": true, "cpu_model": "AMD EPYC"}, '
                                          '"gpus": {"devices": []}}')
    rows = [{"label": f"replicate-{k}", "host": h, "mean_ms": 150.0 + 10 * k, "pass_means_ms": {1: 150.0 + 10 * k},
             "pass_range_ms": [140.0 + 10 * k, 160.0 + 10 * k]} for k, h in enumerate(hosts, 1)]
    return {"format_version": 1, "study": "demo", "submission": "sub", "created_utc": "2026-12-01T20:40:00Z",
            "baseline": {"label": "replicate-1", "host": hosts[0], "path": str(run)},
            "replicates": [{"label": r["label"], "host": r["host"], "run": str(run), "manifest_sha256": "0" * 64,
                            "verified": True} for r in rows],
            "tolerances": {"file": None, "compare": {}, "cross_host": {}},
            "verdict": {"passed": None, "failures": []},
            "backends": [{"workload": "mixed", "backend": "raw", "hosts": rows, "decision_flips": 0,
                          "max_abs_probability_delta": 0.0, "cross_host_failures": [], "hosts_outside_tolerances": [],
                          "spread": {"min_ms": 160.0, "max_ms": 170.0, "mean_ms": 165.0, "relative_range": 0.06,
                                     "cv": 0.04, "n": 2}}]}


def test_collect_plot_starts_at_zero_names_hardware_and_date_and_says_same_host(tmp_path):
    from openjev_repro.cluster.collect import CrossHostSummary, means_figure, to_markdown

    same = CrossHostSummary.decode(_summary(tmp_path, ("vm", "vm")))
    fig = means_figure(same)
    title = fig._suptitle.get_text()
    assert "all on one host (vm)" in title and "CPU only (AMD EPYC)" in title and "2026-12-01" in title
    assert fig.axes[0].get_ylim()[0] == 0 and "cross" not in title.lower()
    assert to_markdown(same).startswith("# Replicate report, all on the same host vm: demo")
    apart = CrossHostSummary.decode(_summary(tmp_path, ("node-a", "node-b")))
    assert means_figure(apart)._suptitle.get_text().startswith("Per-host means")
    assert to_markdown(apart).startswith("# Cross-host report: demo")


def test_cdf_legend_says_its_marks_pool_the_passes_and_the_report_gives_their_values(gated_run, tmp_path):
    from openjev_repro.evidence.rows import read_rows
    from openjev_repro.results.report import plot_figures

    run, _ = gated_run
    fig = plot_figures(read_rows(run / "rows.jsonl"), "test")["latency_cdf.png"]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "P50 (passes 1, 2 pooled)" in labels and "P95 JevBench rank (passes 1, 2 pooled)" in labels, labels
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "Pooled over all measured passes (the CDF plot's marks): one P50 " in report


def test_claims_names_the_report_and_keeps_its_columns_on_finding_lines():
    done = invoke("claims", "--file", "manifests/published/open-jev-h200-packed-silu-2026-10-02.yaml")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("claims of open-jev-h200-validation-2026-10.txt · Packed-SiLU A/B, 2026-10-02 (")
    rows = [line for line in lines if line.split(" ", 1)[0] in ("OK", "FINDING", "FAIL", "STALE")]
    assert any(line.startswith("FINDING ") for line in rows)
    assert len({line.index(" stated ") for line in rows}) == 1, rows  # one column for every mark
    assert len({len(line.split(" ", 1)[0]) + len(line.split(" ", 1)[1]) - len(line.split(" ", 1)[1].lstrip())
                for line in rows}) == 1, rows  # the name column starts at the same place


def test_plan_prints_no_python_none():
    done = invoke("plan", "--recipe", "recipes/demo.yaml")
    assert done.returncode == 0, done.stderr
    assert "None" not in done.stdout and "controls: none (no GPU, NUMA node or CPU list pinned)" in done.stdout


def test_report_rounds_numbers_lists_backends_in_recipe_order_and_an_imported_run_has_no_feasibility(gated_run, tmp_path):
    from openjev_repro.evidence.recipe import load_recipe
    from openjev_repro.evidence.records import BackendsRecord
    from openjev_repro.evidence.rundir import RunDir
    from openjev_repro.evidence.summary import GateResult
    from openjev_repro.results.report import _gate_lines, render_report, run_facts_of
    from openjev_repro.results.statistics import summarize

    gate = GateResult(name="g", kind="max_probability_delta", evaluated=True, passed=True, errors=0,
                      detail="max |p(a) - p(b)| = 6.00337503842141e-06 over 24 pairs (allowed <= 0.001); ratio 1.0672755456898344")
    line = _gate_lines([gate])[-1]
    assert "6.003e-06" in line and "ratio 1.067 |" in line and "0.001" in line and "1.06727" not in line, line
    backends = {"backends": {"a-raw": {"weights_fingerprint": "wfp1:" + "0" * 64},
                             "b-fast": {"weights_fingerprint": "wfp1:" + "1" * 64}}}
    facts = run_facts_of(RunDir(tmp_path), BackendsRecord.from_json(backends), ["b-fast", "a-raw"])
    assert [f.split(":")[0] for f in facts] == ["- b-fast", "- a-raw"]
    run, _ = gated_run
    recipe = load_recipe(run / "recipe.yaml")
    recipe = recipe.model_copy(update={"protocol": recipe.protocol.model_copy(update={"feasibility_passes": 0})})
    measured_only = [r for r in read_rows_of(run) if r.phase == "measured"]  # what an import holds
    text = render_report(summarize(measured_only, recipe), measured_only, recipe)
    assert "across its 2 measured passes." in text and "feasibility and measured" not in text.split("## Gates")[0]


def read_rows_of(run: Path) -> list:
    from openjev_repro.evidence.rows import read_rows

    return read_rows(run / "rows.jsonl")


def _slurm_up() -> bool:
    import shutil

    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20, check=False)
    return done.returncode == 0 and any(s.strip() in ("idle", "mix", "alloc") for s in done.stdout.split())


@pytest.mark.slurm
def test_status_through_a_pipe_is_unwrapped_and_keeps_run_names_whole(tmp_path):
    """A real one-replicate submission on the local Slurm (scripts/slurm-local.sh start)."""
    from studykit import scripted_backend, write_study

    from openjev_repro.manifest.keys import generate_keypair

    if not _slurm_up():
        (pytest.fail if os.environ.get("OPENJEV_REQUIRE_SLURM") == "1" else pytest.skip)(
            "no running Slurm with an idle node (scripts/slurm-local.sh start)")
    recipe = write_study(tmp_path, [scripted_backend("one")])
    private, _, _ = generate_keypair(tmp_path / "key")
    sub = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(private),
                 "--out", str(tmp_path / "subs"))
    assert sub.returncode == 0, sub.stderr
    done = invoke("status", "--submission", sub.stdout.splitlines()[-1], "--wait", timeout=300)
    assert done.returncode == 0, done.stderr
    runs = list((Path(sub.stdout.splitlines()[-1]) / "replicate-1").glob("test-study-*"))
    assert runs and runs[0].name in done.stdout and "…" not in done.stdout, done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) > 80  # not squeezed into an 80-column box


def test_collect_markdown_rounds_the_numbers_of_its_failures(tmp_path):
    from openjev_repro.cluster.collect import CrossHostSummary, to_markdown

    summary = _summary(tmp_path, ("node-a", "node-b"))
    failure = "replicate-2: mixed/raw→raw: mean ratio 1.0672755456898344 exceeds 1.05"
    summary["backends"][0]["hosts"][1].update(mean_ratio=1.0672755456898344, decision_flips=0, failures=[failure])
    summary["verdict"] = {"passed": False, "failures": [failure]}
    text = to_markdown(CrossHostSummary.decode(summary))
    assert "mean ratio 1.067 exceeds 1.05" in text and "1.06727" not in text

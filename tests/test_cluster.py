"""Studies on Slurm: sbatch options, allocation records, cross-host statistics, and against the
real local cluster (scripts/slurm-local.sh): a replicate cancelled mid-pass with scancel, its
evidence incomplete with the Slurm state recorded, `--resume` completing it, and `collect`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import yaml
from invoking import invoke as run_invoke
from studykit import scripted_backend, write_study

from openjev_repro.cluster.crosshost import load_cross_host_tolerances, spread
from openjev_repro.cluster.jobscript import SbatchOptions, sbatch_argv, slurm_time
from openjev_repro.cluster.slurm import QueuedJob, SacctReply, SlurmError, SqueueReply, parse_reply, task_ids
from openjev_repro.cluster.submission import Submission, SubmissionRecord, with_slurm_cause
from openjev_repro.cluster.task import GPU_SOURCE, TaskFailed, study_argv
from openjev_repro.errors import RecipeError
from openjev_repro.evidence.records import SlurmGpu
from openjev_repro.host.allocation import allocated_gpu, slurm_record, visible_index

REPO = Path(__file__).resolve().parents[1]
# CI starts the local cluster first and sets this, so a missing Slurm fails instead of skipping.
REQUIRED = os.environ.get("OPENJEV_REQUIRE_SLURM") == "1"


def invoke(*args: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = run_invoke("--search-root", str(REPO), *args, cwd=REPO, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"invoke {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


# --- without a cluster ---------------------------------------------------------------


def test_slurm_cause_comes_first_and_the_study_message_is_kept():
    assert with_slurm_cause(None, "terminated by Slurm (SIGTERM)") == "terminated by Slurm (SIGTERM)"
    first = with_slurm_cause("Interrupted. The run is marked incomplete.", "terminated by Slurm (SIGTERM)")
    assert first == "terminated by Slurm (SIGTERM); Interrupted. The run is marked incomplete."
    assert with_slurm_cause(first, "terminated by Slurm (TIMEOUT)") == \
        "terminated by Slurm (TIMEOUT); Interrupted. The run is marked incomplete."


def test_slurm_time_and_array_task_strings():
    assert slurm_time("45m") == "0-00:45:00"
    assert slurm_time("26h") == "1-02:00:00"
    assert slurm_time("90s") == "0-00:01:30"
    assert task_ids("1-3,5") == [1, 2, 3, 5]
    assert task_ids("2-8:2%4") == [2, 4, 6, 8]


# squeue --json of Slurm 22.05 while slurmctld is down: exit status 0, the failure only in "errors".
SQUEUE_DOWN = """{"meta": {"Slurm": {"release": "22.05.8"}}, "errors": [{"description": "Failed while looking
 for jobs", "error_number": -1, "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}"""


def test_a_reply_with_errors_is_an_error_not_an_empty_queue():
    with pytest.raises(SlurmError, match="Failed while looking for jobs .slurm_load_jobs.; is slurmctld running"):
        parse_reply(SQUEUE_DOWN.replace("\n", ""), "squeue --json", SqueueReply)
    with pytest.raises(SlurmError, match="did not print JSON"):
        parse_reply("Slurm accounting storage is disabled", "sacct --json", SacctReply)
    assert parse_reply('{"errors": [], "jobs": [{"job_id": 7}]}', "squeue --json", SqueueReply).jobs == [QueuedJob(job_id=7)]


def test_squeue_and_sacct_jobs_decode_in_the_old_and_the_new_data_parsers_shapes():
    old = parse_reply('{"jobs": [{"job_id": 12, "array_job_id": 10, "array_task_id": 2, "job_state": "RUNNING", '
                      '"state_reason": "None", "nodes": "n1", "exit_code": 0, "standard_output": "/s/x.out"}]}',
                      "squeue --json", SqueueReply)
    assert [s.to_dict() for s in old.jobs[0].states("squeue")] == [
        {"job_id": 12, "array_job_id": 10, "array_task_id": 2, "state": "RUNNING", "reason": None, "node": "n1",
         "exit_code": 0, "source": "squeue"}]
    # Slurm 23.02+: numbers as {"set", "number"}, job_state a list of flags, exit_code an object; a pending
    # array is one record whose task string names its indices.
    new = parse_reply('{"jobs": [{"job_id": {"set": true, "number": 10}, "array_job_id": {"set": true, "number": 10},'
                      ' "array_task_id": {"set": false, "number": 0}, "array_task_string": "1-3", "job_state": '
                      '["PENDING"], "state_reason": "Priority", "exit_code": {"status": ["PENDING"], "return_code": '
                      '{"set": false}}, "nodes": ""}]}', "squeue --json", SqueueReply)
    states = new.jobs[0].states("squeue")
    assert [(s.array_task_id, s.state, s.reason, s.node, s.exit_code) for s in states] == [
        (1, "PENDING", "Priority", None, None), (2, "PENDING", "Priority", None, None),
        (3, "PENDING", "Priority", None, None)]
    acct = parse_reply('{"jobs": [{"job_id": 11, "array": {"job_id": 10, "task_id": {"set": true, "number": 1}}, '
                       '"state": {"current": ["CANCELLED"], "reason": "None"}, "exit_code": {"return_code": '
                       '{"set": true, "number": 15}}, "nodes": "n1"}]}', "sacct --json", SacctReply)
    state = acct.jobs[0].job_state()
    assert state is not None and (state.job_id, state.array_job_id, state.array_task_id, state.state,
                                  state.exit_code) == (11, 10, 1, "CANCELLED", 15)
    with pytest.raises(SlurmError, match=r"squeue --json printed JSON of another shape .*\$\.jobs\[0\]\.job_state"):
        parse_reply('{"jobs": [{"job_id": 1, "job_state": {"x": 1}}]}', "squeue --json", SqueueReply)


def test_sbatch_argv_carries_every_option(tmp_path: Path):
    argv = sbatch_argv(SbatchOptions(partition="h200", gres="gpu:1", time="45m", account="lab", exclusive=True),
                       replicates=[1, 3], submission=tmp_path, job_name="note", comment="openjev-repro x: note",
                       workdir=REPO)
    assert argv[0] == "--array=1,3"
    for expected in ("--partition=h200", "--gres=gpu:1", "--time=0-00:45:00", "--account=lab", "--exclusive",
                     "--job-name=note", "--comment=openjev-repro x: note", f"--chdir={REPO}",
                     f"--output={tmp_path}/replicate-%a/slurm-%A_%a.out"):
        assert expected in argv
    bare = sbatch_argv(SbatchOptions(), replicates=[2], submission=tmp_path, job_name="j", comment="c", workdir=REPO)
    assert not any(a.startswith(("--partition", "--gres", "--time", "--account", "--exclusive")) for a in bare)


def test_slurm_record_from_a_task_environment():
    env = {"SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2", "SLURMD_NODENAME": "gpu07",
           "SLURM_JOB_PARTITION": "h200", "CUDA_VISIBLE_DEVICES": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
           "HOME": "/root"}
    record = slurm_record(env)
    assert record is not None
    assert (record["job_id"], record["array_job_id"], record["array_task_id"], record["node"]) == ("42", "40", 2, "gpu07")
    assert record["gpu"] == {"allocated": None, "index": None, "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
                             "source": "CUDA_VISIBLE_DEVICES", "uuid_error": None}
    assert "HOME" not in record["env"]
    assert slurm_record({"HOME": "/root"}) is None  # not a Slurm task: host.json gets no "slurm"
    assert allocated_gpu({}) is None


def test_allocated_gpu_index_prefers_slurm_job_gpus():
    gpu = allocated_gpu({"SLURM_JOB_GPUS": "3,5", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert gpu is not None and gpu["allocated"] == 3 and gpu["source"] == "SLURM_JOB_GPUS"
    # Either NVML knows the GPU here, or why not is recorded; never a made-up UUID.
    assert (gpu["uuid"] is None) == (gpu["uuid_error"] is not None)


def test_visible_index_with_and_without_device_constraints():
    assert visible_index([3], list(range(8))) == 3  # the whole node visible: physical index
    assert visible_index([3, 5], [0, 1]) == 0  # ConstrainDevices: only the allocated, renumbered
    assert visible_index([0], [0]) == 0
    assert visible_index([6], [0, 1, 2]) is None  # NVML does not show the allocated GPU
    assert visible_index([], [0]) is None


def test_study_argv_passes_the_allocated_gpu_only_for_recipes_with_gpu_controls(tmp_path: Path):
    data = SubmissionRecord(format_version=1, replicates=1, python=sys.executable, repo=str(REPO), recipe="r.yaml",
                            key="k.key", gpu_controls=False)
    gpu = SlurmGpu(allocated=3, index=3, uuid="GPU-0a1b2c3d-0000-1111-2222-333344445555", source="SLURM_JOB_GPUS",
                   uuid_error=None)
    argv = study_argv(Submission(tmp_path, data), tmp_path / "replicate-1", gpu)
    assert argv[argv.index("study") + 1:] == ["--recipe", "r.yaml", "--out", str(tmp_path / "replicate-1"),
                                              "--key", "k.key"]
    with_controls = Submission(tmp_path, msgspec.structs.replace(data, gpu_controls=True))
    with pytest.raises(TaskFailed, match="no GPU in the allocation"):
        study_argv(with_controls, tmp_path, None)
    argv = study_argv(with_controls, tmp_path, gpu)
    assert argv[-6:] == ["--gpu-uuid", gpu.uuid, "--gpu-source", "slurm", "--gpu-index", "3"]


def test_spread_of_host_means():
    s = spread([100.0, 110.0, 90.0])
    assert (s.min_ms, s.max_ms, s.mean_ms) == (90.0, 110.0, 100.0)
    assert s.relative_range == pytest.approx(0.2)
    assert s.cv == pytest.approx(10.0 / 100.0)  # sample standard deviation of 90, 100, 110 is 10
    assert spread([5.0]).cv is None


def test_cross_host_tolerances_file(tmp_path: Path):
    good = tmp_path / "good.yaml"
    good.write_text("format_version: 1\nmax_mean_ratio: 1.2\ncross_host: {max_cv: 0.1}\n")
    assert load_cross_host_tolerances(good) == ({"format_version": 1, "max_mean_ratio": 1.2}, {"max_cv": 0.1})
    bad = tmp_path / "bad.yaml"
    bad.write_text("format_version: 1\ncross_host: {max_spread: 0.1}\n")
    with pytest.raises(RecipeError, match="cross_host takes only"):
        load_cross_host_tolerances(bad)
    bad.write_text("format_version: 1\nmax_cv: 0.1\n")
    with pytest.raises(RecipeError, match="unknown keys max_cv"):
        load_cross_host_tolerances(bad)
    # compare's own checks apply to its part: per_backend limits (issue 11) included
    bad.write_text("format_version: 1\nper_backend: {scripted: {max_mean_ratio: fast}}\ncross_host: {max_cv: 0.1}\n")
    with pytest.raises(RecipeError, match="per_backend.scripted.max_mean_ratio must be a finite number"):
        load_cross_host_tolerances(bad)
    good.write_text("format_version: 1\nmax_mean_ratio: 1.2\nper_backend: {scripted: {max_mean_ratio: 2.0}}\n")
    assert load_cross_host_tolerances(good)[0]["per_backend"] == {"scripted": {"max_mean_ratio": 2.0}}


def test_commands_name_missing_options():
    for args, option in ((["submit"], "--recipe"), (["status"], "--submission"), (["collect"], "--submission")):
        proc = invoke(*args)
        assert proc.returncode == 1
        assert proc.stderr.strip() == f"error: {option} is required; `invoke {args[0]} --help` lists every option.", \
            proc.stderr
        assert "Traceback" not in proc.stderr


def test_collect_refuses_a_directory_that_is_no_submission(tmp_path: Path):
    proc = invoke("collect", "--submission", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and "not a submission directory" in proc.stderr
    assert list(tmp_path.iterdir()) == []


# --- against the real local cluster --------------------------------------------------


def _slurm_up() -> bool:
    if shutil.which("squeue") is None:
        return False
    try:
        proc = subprocess.run(["sinfo", "--json"], check=False, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    if proc.returncode != 0:
        return False
    states = [str(n.get("state", "")).lower() for n in json.loads(proc.stdout).get("nodes", [])]
    return any(s in ("idle", "mixed", "allocated") for s in states)


@pytest.fixture(scope="module")
def slurm() -> None:
    if not _slurm_up():
        (pytest.fail if REQUIRED else pytest.skip)("no running Slurm with an idle node (scripts/slurm-local.sh start)")


@pytest.fixture()
def keypair(tmp_path: Path) -> tuple[Path, Path]:
    from openjev_repro.manifest.keys import generate_keypair

    private, public, _ = generate_keypair(tmp_path / "key")
    return private, public


def _slow_study(tmp: Path) -> Path:
    """One scripted backend answering after 0.25 s: each pass of 8 requests lasts about 2 s."""
    backend = scripted_backend("scripted")
    backend["env"]["SCRIPTED_DELAY_S"] = "0.25"
    return write_study(tmp, [backend], n=8, protocol={"measured_passes": 3, "request_timeout_s": 10.0})


def _wait(predicate, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


QUEUE_WAIT_S = 900  # a node shared with other jobs (another checkout's tests) may keep a task queued this long


def _wait_started(sub: Path, *replicates: int) -> None:
    """Until each replicate's newest task has left Slurm's queue. Every bound after it counts from the start:
    a task may wait in the queue for minutes while other jobs hold the node's cores, which says nothing of it."""
    _wait(lambda: all(_status(sub)[k]["slurm"]["state"] not in ("PENDING", "UNKNOWN") for k in replicates), QUEUE_WAIT_S,
          f"replicate(s) {', '.join(map(str, replicates))} to start", step=1)


def _status(sub: Path) -> dict[int, dict]:
    proc = invoke("status", "--submission", str(sub), "--json", check=True)
    return {r["replicate"]: r for r in json.loads(proc.stdout)["replicates"]}


def _measured_rows(replicate: Path) -> bool:
    return any('"measured"' in rows.read_text() for rows in replicate.glob("*/rows.jsonl"))


def _cancel_all(sub: Path) -> None:
    rounds = json.loads((sub / "submission.json").read_text())["rounds"]
    subprocess.run(["scancel", *(str(r["array_job_id"]) for r in rounds)], check=False, capture_output=True)


def _runs(replicate: Path) -> list[Path]:
    return sorted(p for p in replicate.iterdir() if p.is_dir())


@pytest.mark.slurm
def test_scancel_mid_pass_leaves_incomplete_evidence_and_resume_completes_it(slurm, tmp_path, keypair, request):
    private, public = keypair
    recipe = _slow_study(tmp_path / "study")
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "2", "--key", str(private),
                  "--out", str(tmp_path / "subs"), "--time", "10m", check=True)
    sub = Path(proc.stdout.strip().splitlines()[-1])
    request.addfinalizer(lambda: _cancel_all(sub))  # no job outlives a failed test
    record = json.loads((sub / "submission.json").read_text())
    array = record["rounds"][0]["array_job_id"]
    assert record["rounds"][0]["replicates"] == [1, 2]
    assert (sub / "openjev-repro.pub").read_bytes() == public.read_bytes()

    # Cancel replicate 2 while its measured passes run.
    _wait_started(sub, 1, 2)
    _wait(lambda: _measured_rows(sub / "replicate-2"), 120, "replicate 2's first measured row", step=0.05)
    subprocess.run(["scancel", f"{array}_2"], check=True)
    _wait(lambda: all(r["slurm"]["state"] in ("COMPLETED", "CANCELLED") for r in _status(sub).values()), 120,
          "both tasks to end")
    status = _status(sub)
    assert status[1]["evidence"] == "complete"
    assert status[2]["evidence"] == "incomplete" and status[2]["slurm"]["state"] == "CANCELLED"
    [cancelled] = _runs(sub / "replicate-2")
    state = json.loads((cancelled / "state.json").read_text())
    assert state["status"] == "incomplete"
    assert state["slurm_end"]["state"] == "CANCELLED"
    assert state["error"].startswith("terminated by Slurm (CANCELLED)")
    assert "; stopped by SIGTERM" in state["error"]  # the study's own handling (like Ctrl-C), kept after the cause
    assert not (cancelled / "manifest.dsse.json").exists()  # an incomplete run is never signed
    attempt = json.loads(next((sub / "replicate-2").glob("attempt-*.json")).read_text())
    assert attempt["outcome"] == "terminated" and attempt["slurm_final"]["state"] == "CANCELLED"
    assert attempt["run"] == cancelled.name and attempt["slurm"]["array_task_id"] == 2

    # Nothing complete is ever collected from an incomplete replicate.
    proc = invoke("collect", "--submission", str(sub), "--pubkey", str(public))
    assert proc.returncode == 1 and "replicate 2 has no complete run" in proc.stderr
    assert not list(sub.glob("collect-*"))

    # Resume resubmits replicate 2 only, as a new run directory beside the cancelled one.
    [first_run] = _runs(sub / "replicate-1")
    invoke("submit", "--resume", str(sub), check=True)
    rounds = json.loads((sub / "submission.json").read_text())["rounds"]
    assert [r["replicates"] for r in rounds] == [[1, 2], [2]]
    _wait_started(sub, 2)
    _wait(lambda: _status(sub)[2]["evidence"] == "complete", 120, "the resumed replicate 2")
    runs = _runs(sub / "replicate-2")
    assert len(runs) == 2 and runs[0] == cancelled
    assert json.loads((cancelled / "state.json").read_text())["status"] == "incomplete"  # kept as it was
    assert _runs(sub / "replicate-1") == [first_run]  # the complete replicate got no new passes
    host = json.loads((runs[1] / "host.json").read_text())
    assert host["slurm"]["array_job_id"] == str(rounds[1]["array_job_id"]) and host["slurm"]["array_task_id"] == 2
    assert host["slurm"]["node"]
    from openjev_repro.manifest.run_manifest import read_statement

    _, statement = read_statement(runs[1] / "manifest.dsse.json")
    assert statement["predicate"]["host"]["slurm"] == host["slurm"]  # the manifest records the allocation
    proc = invoke("submit", "--resume", str(sub), check=True)
    assert "nothing to resubmit" in proc.stderr

    # Collect: both replicates verified, the cross-host report written and signed.
    tolerances = tmp_path / "tolerances.yaml"
    tolerances.write_text(yaml.safe_dump({"format_version": 1, "max_mean_ratio": 3.0, "max_probability_delta": 0.0,
                                          "decisions_must_match": True, "cross_host": {"max_relative_range": 2.0}}))
    proc = invoke("collect", "--submission", str(sub), "--pubkey", str(public), "--tolerances", str(tolerances), check=True)
    out = Path(proc.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in out.iterdir()) == ["means.png", "summary.dsse.json", "summary.json", "summary.md"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"]["passed"] is True
    assert [r["label"] for r in summary["replicates"]] == ["replicate-1", "replicate-2"]
    assert summary["replicates"][1]["run"] == str(runs[1])
    [backend] = summary["backends"]
    assert backend["decision_flips"] == 0 and backend["max_abs_probability_delta"] == 0.0
    assert backend["spread"]["n"] == 2 and backend["spread"]["min_ms"] <= backend["spread"]["max_ms"]
    assert "**Verdict: PASS**" in (out / "summary.md").read_text()
    from openjev_repro.cluster.collect import verify_summary
    from openjev_repro.errors import VerificationError

    assert verify_summary(out, public).files == ["summary.json", "summary.md", "means.png"]

    # A given baseline run (here replicate 1's, verified with the submission's key): every
    # replicate is compared with it, itself included.
    proc = invoke("collect", "--submission", str(sub), "--pubkey", str(public), "--baseline", str(first_run), check=True)
    given = json.loads((Path(proc.stdout.strip().splitlines()[-1]) / "summary.json").read_text())
    assert given["baseline"]["label"] == "baseline" and given["verdict"]["passed"] is None
    hosts = given["backends"][0]["hosts"]
    assert [h["label"] for h in hosts] == ["baseline", "replicate-1", "replicate-2"]
    assert hosts[1]["mean_ratio"] == 1.0 and hosts[1]["max_abs_probability_delta"] == 0.0

    # An incomplete baseline (the cancelled run) is refused, and nothing is written.
    collections = sorted(sub.glob("collect-*"))
    proc = invoke("collect", "--submission", str(sub), "--pubkey", str(public), "--baseline", str(cancelled))
    assert proc.returncode == 1 and proc.stderr.startswith("error: the baseline") and "incomplete" in proc.stderr
    assert "Traceback" not in proc.stderr and sorted(sub.glob("collect-*")) == collections

    # A declared tolerance that fails: the report is still written, the exit status is 1.
    tolerances.write_text(yaml.safe_dump({"format_version": 1, "max_mean_ratio": 0.001}))
    proc = invoke("collect", "--submission", str(sub), "--pubkey", str(public), "--tolerances", str(tolerances))
    assert proc.returncode == 1 and proc.stderr.startswith("error: 1 tolerance failure")
    failed = Path(proc.stdout.strip().splitlines()[-1])
    assert failed != out and json.loads((failed / "summary.json").read_text())["verdict"]["passed"] is False
    assert backend["hosts"][1]["label"] == "replicate-2"
    assert json.loads((failed / "summary.json").read_text())["backends"][0]["hosts_outside_tolerances"] == ["replicate-2"]
    (failed / "summary.md").write_text("edited")
    with pytest.raises(VerificationError, match="changed after it was signed"):
        verify_summary(failed, public)


@pytest.mark.slurm
def test_a_task_past_its_time_limit_leaves_incomplete_evidence_marked_timeout(slurm, tmp_path, keypair, request):
    """--time 1m on a study of about 3 minutes: Slurm ends it (60 to 90 s, its timer's period)."""
    private, _ = keypair
    backend = scripted_backend("scripted")
    backend["env"]["SCRIPTED_DELAY_S"] = "1.0"
    recipe = write_study(tmp_path / "study", [backend], n=8, protocol={"measured_passes": 20, "request_timeout_s": 10.0})
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(private), "--time", "1m",
                  "--out", str(tmp_path / "subs"), check=True)
    sub = Path(proc.stdout.strip().splitlines()[-1])
    request.addfinalizer(lambda: _cancel_all(sub))
    _wait_started(sub, 1)  # Slurm's time limit counts from here
    _wait(lambda: _status(sub)[1]["slurm"]["state"] == "TIMEOUT", 180, "Slurm's time limit", step=2)
    status = _status(sub)[1]
    assert status["evidence"] == "incomplete"
    [run] = _runs(sub / "replicate-1")
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "incomplete" and state["slurm_end"]["state"] == "TIMEOUT"
    assert state["error"].startswith("terminated by Slurm (TIMEOUT")
    assert '"measured"' in (run / "rows.jsonl").read_text()  # it was stopped mid-study, its rows kept
    assert not (run / "manifest.dsse.json").exists()
    assert status["terminations"][0]["state"] == "TIMEOUT"


def _partitions() -> set[str]:
    proc = subprocess.run(["sinfo", "--json"], check=True, capture_output=True, text=True, timeout=20)
    return {p for n in json.loads(proc.stdout)["nodes"] for p in n.get("partitions", [])}


@pytest.mark.slurm
def test_a_preempted_task_leaves_incomplete_evidence_marked_preempted(slurm, tmp_path, keypair, request):
    """The local cluster's "urgent" partition preempts (cancels) jobs of "debug". The urgent job asks for the one
    GPU gres this task holds, not the whole node: it preempts this task, not other jobs sharing the node."""
    if "urgent" not in _partitions():
        (pytest.fail if REQUIRED else pytest.skip)("this cluster has no preempting partition 'urgent'")
    private, _ = keypair
    proc = invoke("submit", "--recipe", str(_slow_study(tmp_path / "study")), "--replicates", "1",
                  "--key", str(private), "--partition", "debug", "--gres", "gpu:1", "--out", str(tmp_path / "subs"),
                  check=True)
    sub = Path(proc.stdout.strip().splitlines()[-1])
    request.addfinalizer(lambda: _cancel_all(sub))
    _wait_started(sub, 1)
    _wait(lambda: _measured_rows(sub / "replicate-1"), 120, "the first measured row", step=0.05)
    urgent = subprocess.run(["sbatch", "--parsable", "--partition=urgent", "--gres=gpu:1", "--output=/dev/null",
                             "--wrap", "sleep 1"], check=True, capture_output=True, text=True).stdout.strip()
    request.addfinalizer(lambda: subprocess.run(["scancel", urgent], check=False))
    _wait(lambda: _status(sub)[1]["slurm"]["state"] == "PREEMPTED", 90, "the preemption", step=1)
    [run] = _runs(sub / "replicate-1")
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "incomplete" and state["slurm_end"]["state"] == "PREEMPTED"
    assert state["error"].startswith("terminated by Slurm (PREEMPTED") and "; stopped by SIGTERM" in state["error"]
    assert not (run / "manifest.dsse.json").exists()
    attempt = json.loads(next((sub / "replicate-1").glob("attempt-*.json")).read_text())
    assert attempt["outcome"] == "terminated" and attempt["slurm_final"]["state"] == "PREEMPTED"


@pytest.mark.slurm
def test_submit_that_sbatch_refuses_leaves_nothing_behind(slurm, tmp_path, keypair):
    private, _ = keypair
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")])
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(private),
                  "--partition", "no-such-partition", "--out", str(tmp_path / "subs"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: sbatch failed") and "Traceback" not in proc.stderr
    assert list((tmp_path / "subs").iterdir()) == []


@pytest.mark.slurm
def test_a_gpu_recipe_measures_on_the_allocated_gpu_or_not_at_all(slurm, tmp_path, keypair, request):
    """--gres gpu:1 is accepted; the task reads the GPU Slurm allocated. The local cluster's gres
    is no GPU (NVML has none here), so the task must fail before any study starts, saying why."""
    private, _ = keypair
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")], extra={
        "controls": {"gpu": {"index": 0, "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555"},
                     "reservation": {"timeout": "5m", "note": "cluster test: reserved for test-study"}}})
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(private), "--gres", "gpu:1",
                  "--out", str(tmp_path / "subs"), check=True)
    sub = Path(proc.stdout.strip().splitlines()[-1])
    request.addfinalizer(lambda: _cancel_all(sub))
    record = json.loads((sub / "submission.json").read_text())
    assert "--gres=gpu:1" in record["rounds"][0]["sbatch"]
    assert "--time=0-00:05:00" in record["rounds"][0]["sbatch"]  # the reservation timeout
    assert record["job_name"] == "cluster test: reserved for test-study"
    assert record["comment"] == "openjev-repro test-study: cluster test: reserved for test-study"
    _wait_started(sub, 1)
    _wait(lambda: _status(sub)[1]["slurm"]["state"] in ("FAILED", "COMPLETED"), 60, "the task to end")
    status = _status(sub)[1]
    attempt = json.loads(next((sub / "replicate-1").glob("attempt-*.json")).read_text())
    gpu = attempt["slurm"]["gpu"]
    assert gpu["source"] == "SLURM_JOB_GPUS" and gpu["allocated"] == 0
    if gpu["uuid"] is None:  # no NVIDIA driver on this node
        assert status["slurm"]["state"] == "FAILED" and status["evidence"] == "none"
        assert attempt["outcome"] == "failed" and "the allocated one is unknown" in attempt["error"]
        assert _runs(sub / "replicate-1") == []  # no study started, nothing measured on the recipe's GPU
    else:  # the study ran on the allocated GPU (the scripted backend ignores it) and recorded it
        host = json.loads((_runs(sub / "replicate-1")[-1] / "host.json").read_text())
        assert host["slurm"]["gpu"]["uuid"] == gpu["uuid"]
        assert host["gpu_override"]["run_time"]["uuid"] == gpu["uuid"] and host["gpu_override"]["source"] == "slurm"


def test_submit_checks_key_and_gpu_before_anything(tmp_path: Path, keypair):
    private, _ = keypair
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")])
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(tmp_path / "nope.key"),
                  "--out", str(tmp_path / "subs"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: Cannot read the private key")
    gpu = write_study(tmp_path / "gpu", [scripted_backend("scripted")], extra={
        "controls": {"gpu": {"index": 0, "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555"}}})
    proc = invoke("submit", "--recipe", str(gpu), "--replicates", "1", "--key", str(private),
                  "--out", str(tmp_path / "subs"))
    assert proc.returncode == 1 and "submit with --gres gpu:1" in proc.stderr
    assert not (tmp_path / "subs").exists() or list((tmp_path / "subs").iterdir()) == []


def test_resume_takes_no_new_options(tmp_path: Path):
    proc = invoke("submit", "--resume", str(tmp_path), "--recipe", "recipes/demo.yaml", "--exclusive")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("error: --resume reuses the submission's recipe, key and sbatch options; "
                                   "drop --recipe, --exclusive")


def test_a_task_whose_key_is_unusable_fails_before_measuring(tmp_path: Path, monkeypatch):
    from openjev_repro.cluster.task import run_task
    from openjev_repro.hashing import hash_file

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")])
    sub = Submission.create(tmp_path / "subs", "test-study", {
        "recipe": str(recipe), "recipe_sha256": hash_file(recipe), "replicates": 1,
        "key": str(tmp_path / "gone.key"), "pubkey": "openjev-repro.pub", "python": sys.executable,
        "repo": str(REPO), "gpu_controls": False})
    assert run_task(sub, 1) == 1
    [attempt] = sub.attempts(1)
    assert attempt.outcome == "failed" and "signing key is not usable" in str(attempt.error)
    assert sub.runs(1) == []  # no run directory: nothing was measured


def _task_submission(tmp_path: Path, keypair, *, gpu: bool) -> Submission:
    from openjev_repro.hashing import hash_file

    private, _ = keypair
    extra = {"controls": {"gpu": {"index": 0, "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555"}}} if gpu else None
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")], n=3, extra=extra)
    return Submission.create(tmp_path / "subs", "test-study", {
        "recipe": str(recipe), "recipe_sha256": hash_file(recipe), "replicates": 1, "key": str(private),
        "pubkey": "openjev-repro.pub", "python": sys.executable, "repo": str(REPO), "gpu_controls": gpu})


def test_a_task_hands_the_allocated_gpu_to_the_study_as_a_slurm_override(tmp_path: Path, keypair):
    """The task process as Slurm starts it (here without slurmd): SLURM_JOB_GPUS names the GPU by
    UUID, the study records it as gpu_override with source "slurm" before it asks the host."""
    sub = _task_submission(tmp_path, keypair, gpu=True)
    allocated = "GPU-99999999-aaaa-bbbb-cccc-000000000001"  # not the recipe's GPU
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run([sys.executable, "-m", "openjev_repro.cluster.task", "--submission", str(sub.path),
                           "--replicate", "1"], env={**env, "SLURM_JOB_GPUS": allocated}, cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert f"--gpu-uuid {allocated} --gpu-source {GPU_SOURCE}" in proc.stderr
    [run] = sub.runs(1)
    declared = json.loads((run.path / "plan.json").read_text())["gpu_override"]
    assert declared == {"recipe": {"index": 0, "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555"},
                        "run_time": {"index": None, "uuid": allocated}, "source": "slurm"}
    assert json.loads((run.path / "environment.json").read_text())["gpu_override"] == declared
    # No GPU with that UUID here (no driver, or not this one): the run is incomplete, never signed.
    assert proc.returncode == 1 and run.status == "incomplete" and not run.signed
    [attempt] = sub.attempts(1)
    assert attempt.outcome == "failed" and attempt.run == run.path.name


def test_study_gpu_source_needs_a_gpu_uuid(tmp_path: Path):
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")], n=3)
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), "--gpu-source", "slurm")
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error: --gpu-source needs --gpu-uuid")
    assert not (tmp_path / "runs").exists()


def test_a_run_whose_study_died_reads_incomplete(tmp_path: Path, keypair):
    """A run left "running" by a study that is gone (SIGKILL past KillWait) is not reported running."""
    from openjev_repro.evidence.rundir import RunDir

    sub = _task_submission(tmp_path, keypair, gpu=False)
    run = RunDir.create(sub.replicate_dir(1), "test-study")
    assert [r.status for r in sub.runs(1)] == ["running"]  # this process owns it: alive
    gone = subprocess.Popen(["true"])
    gone.wait()
    owner = dict(run.state_record().to_json()["owner"], pid=gone.pid, start_ticks=None)
    run.update_state(owner=owner)
    [attempt] = sub.runs(1)
    assert attempt.status == "incomplete" and "stale run" in str(attempt.error)
    assert json.loads((run.path / "state.json").read_text())["status"] == "running"  # the file is not rewritten


def test_submit_never_writes_inside_a_run(tmp_path: Path, keypair):
    from openjev_repro.evidence.rundir import RunDir

    private, _ = keypair
    recipe = write_study(tmp_path / "study", [scripted_backend("scripted")])
    run = RunDir.create(tmp_path / "runs", "test-study")
    before = sorted(p.name for p in run.path.iterdir())
    proc = invoke("submit", "--recipe", str(recipe), "--replicates", "1", "--key", str(private),
                  "--out", str(run.path / "subs"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: --out ") and "inside the run directory" in proc.stderr
    assert sorted(p.name for p in run.path.iterdir()) == before

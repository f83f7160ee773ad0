"""The typed records of a run's files read every committed run, and keep the bytes their files had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openjev_repro.errors import EvidenceError, UnsupportedFormat, VerificationError
from openjev_repro.evidence.files import json_text
from openjev_repro.evidence.plan import Plan
from openjev_repro.evidence.records import (
    BackendsRecord,
    CalibrationRecord,
    EnvironmentCheckRecord,
    EnvironmentRecord,
    HostRecord,
    ImportRecord,
    InputsRecord,
    ProcessesRecord,
    ServersRecord,
    StateRecord,
    backends_of,
    calibration_of,
    environment_check_of,
    environment_of,
    host_of,
    import_of,
    inputs_of,
    plan_of,
    processes_of,
    servers_of,
    state_of,
)
from openjev_repro.evidence.rundir import RunDir, Status
from openjev_repro.evidence.state import SlurmEnd
from openjev_repro.evidence.statement import Statement
from openjev_repro.manifest.dsse import parse_envelope, payload_of
from openjev_repro.manifest.run_manifest import read_statement, read_statement_record

REPO = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.parent for p in (REPO / "results").glob("*/*/manifest.dsse.json"))


def test_committed_runs_exist():
    assert len(COMMITTED) >= 3, COMMITTED


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_run_reads_through_its_records(path):
    run = RunDir.open(path)
    state = state_of(run)
    assert state.known_status is Status.COMPLETE and state.format_version == 1 and state.finished
    host = host_of(run)
    assert host is not None and host.format_version == 1
    env = environment_of(run)
    assert env.format_version in (1, 2) and env.gpu_names(None) == ["NVIDIA H200"]
    backends = backends_of(run)
    planned = [b["name"] for b in json.loads((path / "plan.json").read_text())["backends"]]
    assert backends.format_version == 1 and sorted(backends.backends) == sorted(planned)
    assert all(f.weights_fingerprint and f.weights_fingerprint.startswith("wfp1:") for f in backends.backends.values())
    assert import_of(run) is None
    assert all(f.status == "ok" for f in inputs_of(run).files) and processes_of(run).processes
    assert calibration_of(run).p50_us > 0 and "monotonic" in calibration_of(run).timing_boundary.lower()
    plan = plan_of(run)
    assert {b.name for b in plan.backends} == set(backends.backends) and plan.case_ids
    assert all(s.steps[-1].phase == "measured" for s in plan.passes)
    if run.file("servers.json").is_file():
        assert set(servers_of(run).backends) == set(backends.backends) and environment_check_of(run) is not None


@pytest.mark.parametrize(("run_name", "measured_backend"), [("run", "reference-fast-best"),
                                                             ("run-2026-12-01", "reference-fast-graph64")])
def test_the_fast_runs_record_their_gpu_override_and_one_backends_hardware(run_name, measured_backend):
    run = RunDir.open(REPO / "results" / "h200-fast-27b-shape" / run_name)
    override = host_of(run).override
    assert override is not None and override.source == "cli" and override.run_time.uuid != override.recipe.uuid
    measured = {name: f.floor_figures for name, f in backends_of(run).backends.items() if f.floor_figures}
    assert list(measured) == [measured_backend]
    hardware, parameters = measured[measured_backend]
    assert hardware.gpu == "NVIDIA H200" and hardware.copy_tbps > 0 and parameters > 10**10


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_committed_statement_re_encodes_to_its_signed_payload(path):
    """The record's payload() is byte for byte what was signed: build_statement's bytes did not change."""
    envelope, statement = read_statement_record(path / "manifest.dsse.json")
    assert statement.payload() == payload_of(envelope)
    assert statement.format_version == 1 and statement.signed and not statement.aggregate_only
    assert statement.state == RunDir.open(path).state_record().to_json()
    assert set(statement.digests) == {p.relative_to(path).as_posix() for p in RunDir.open(path).evidence_files()}
    _, as_dict = read_statement(path / "manifest.dsse.json")
    assert as_dict == statement.to_json()


def _statement(**predicate) -> dict:
    signed = json.loads(payload_of(parse_envelope((COMMITTED[0] / "manifest.dsse.json").read_bytes(), source="x")))
    signed["predicate"].update(predicate)
    return signed


@pytest.mark.parametrize(("change", "message"), [
    ({"signed": "yes"}, "predicate.signed is not true or false"),
    ({"state": []}, "predicate.state is not an object"),
    ({"gates": {}}, "predicate.gates is not a list"),
    ({"aggregate_only": True, "omitted": [{"name": 1}]}, "predicate.omitted is not a list of {name, sha256} strings"),
    ({"aggregate_only": True, "omitted": []}, "predicate.source_envelope is not a file name"),
])
def test_a_malformed_predicate_is_named(change, message):
    with pytest.raises(VerificationError, match=f"The statement of here is malformed: {message}".replace("{", r"\{")
                       .replace("}", r"\}")):
        Statement.parse(_statement(**change), "here")


def test_a_statement_of_another_type_or_version_is_refused():
    data = _statement()
    with pytest.raises(VerificationError, match="not an in-toto Statement v1"):
        Statement.parse({**data, "_type": "x"}, "here")
    with pytest.raises(UnsupportedFormat, match="here: predicate"):
        Statement.parse(_statement(format_version=2), "here")
    bad = {**data, "subject": [{"name": "a", "digest": {"sha256": "0" * 63}}]}
    with pytest.raises(VerificationError, match=r"subject\[0\] is not"):
        Statement.parse(bad, "here")


def test_older_files_read_with_absent_fields_absent():
    """A field an older writer did not write reads as absent (UNSET) and is written back absent."""
    assert StateRecord.from_json({"status": "running"}) == StateRecord("running")
    assert StateRecord.from_json({"status": "later-word"}).known_status is None
    assert "started_utc" not in StateRecord.from_json({"status": "running"}).to_json()
    env = EnvironmentRecord.from_json({"format_version": 1, "gpus": {"available": True, "source": "nvml", "devices": [
        {"index": 0, "name": "A", "uuid": "u", "source": "nvml"}]}})
    assert env.override is None and env.run_time_uuid is None and env.gpu_names("u") == ["A"] and env.cpu_model is None
    facts = BackendsRecord.from_json({"backends": {"b": {"merged_weights_fingerprint": {"available": False,
                                                                                      "reason": "not merged"},
                                                         "hardware": {"copy_tbps": 0, "matmul_bf16_tflops": 1}}}})
    assert facts.backends["b"].merged_weights_fingerprint is None and facts.backends["b"].floor_figures is None
    imported = ImportRecord.from_json({"format_version": 2, "format": "x", "source": "s", "files_verified": 1,
                                       "rows": 0, "study": {"hardware": ["gpu: H200", "gpu_uuid: GPU-1"]}})
    assert imported.provenance == "verified" and imported.study.hardware_value("gpu") == ["H200"]
    assert imported.digests_file == "manifest.json" and imported.published_gates == ()


@pytest.mark.parametrize(("record", "data", "message"), [
    (StateRecord, {"status": "running", "owner": {"pid": -1}}, "state.json: Expected `int` >= 0 - at `$.owner.pid`"),
    (StateRecord, {"status": "running", "updated_unix": float("nan")}, "at `$.updated_unix`"),
    (StateRecord, {"status": "running", "surprise": 1}, "state.json: Object contains unknown field `surprise`"),
    (HostRecord, {"format_version": 1, "cleanup": {"passed": "yes", "checks": [], "checked_at": "t"}},
     "at `$.cleanup.passed`"),
    (BackendsRecord, {"backends": {"b": {"torch_threads": 2**70}}}, "at `$.backends[...].torch_threads`"),
    (ServersRecord, {"format_version": 1, "backends": {"b": {"launched": True}}}, "missing required field `owned` - at `$.backends[...]`"),
    (ProcessesRecord, {"format_version": 1, "processes": [{"name": "x\n"}]}, "at `$.processes[0]`"),
    (CalibrationRecord, {"n": 1, "p50_us": 1e308 * 10}, "calibration.json"),
])
def test_a_hostile_file_is_one_error_naming_the_file_and_the_field(record, data, message):
    with pytest.raises(EvidenceError) as caught:
        record.from_json(data)
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_the_committed_tolerances_read_as_a_record():
    from openjev_repro.evidence.recipe import read_yaml
    from openjev_repro.evidence.tolerances import Tolerances

    path = REPO / "manifests" / "tolerances" / "h200-reference-rerun.yaml"
    tolerances = Tolerances.parse(read_yaml(path, "tolerances"), path)
    assert tolerances.format_version == 1 and tolerances.to_json() == read_yaml(path, "tolerances")
    raw = tolerances.limits_for("reference-raw")
    assert raw.max_mean_ratio == 1.30 and raw.max_p95_ratio == 1.15 and raw.decisions_must_match is True
    assert tolerances.limits_for("another") == tolerances.limits  # no own limits: the top-level ones


@pytest.mark.parametrize(("data", "message"), [
    ({"format_version": 1, "max_mean_ratio": float("inf")}, "t.yaml: max_mean_ratio must be a finite number >= 0"),
    ({"format_version": 1, "per_backend": {"a": {"weights_must_match": 1}}},
     "t.yaml: per_backend.a.weights_must_match must be true or false, not 1."),
    ({"format_version": 1, "per_backend": {"a": {"max_ratio": 1}}}, "t.yaml: per_backend.a: unknown keys max_ratio"),
    ({"format_version": 1, "backends": {"a": 1}}, "t.yaml: backends maps a baseline backend name"),
    ({"format_version": 1, "speed": 1}, "t.yaml: unknown keys speed; known: backends, decisions_must_match"),
])
def test_a_bad_tolerance_is_named_with_its_file_and_key(data, message):
    from openjev_repro.errors import RecipeError
    from openjev_repro.evidence.tolerances import Tolerances

    with pytest.raises(RecipeError) as caught:
        Tolerances.parse(data, "t.yaml")
    assert str(caught.value).startswith(message), caught.value


WRITTEN = {"state.json": StateRecord, "host.json": HostRecord, "environment.json": EnvironmentRecord,
           "backends.json": BackendsRecord, "inputs.json": InputsRecord, "processes.json": ProcessesRecord,
           "servers.json": ServersRecord, "environment_check.json": EnvironmentCheckRecord,
           "calibration.json": CalibrationRecord, "plan.json": Plan}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_record_written_back_gives_the_committed_file_byte_for_byte(path):
    for name, record in WRITTEN.items():
        if (path / name).is_file():
            data = json.loads((path / name).read_text())
            text = json_text(record.from_json(data).to_json(), indent=2, sort_keys=True)
            assert text.encode() == (path / name).read_bytes(), name


def test_the_state_a_run_dir_writes_is_its_record(tmp_path):
    run = RunDir.create(tmp_path, "s")
    run.attempt("inputs")
    run.finish("inputs")
    record = run.update_state(status=Status.INCOMPLETE, error="stopped", slurm_end={"state": "TIMEOUT"})
    assert record == run.state_record() and record.slurm_end == SlurmEnd(state="TIMEOUT")
    assert record.attempted == record.finished == ("inputs",) and record.owner is not None
    assert json.loads(run.file("state.json").read_text()) == record.to_json()
    assert "stale" not in record.to_json() and "signing_requested" not in record.to_json()


RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_a_resolved_plan_reads_back_to_the_same_json(recipe):
    from openjev_repro.study.planner import resolve_plan
    from openjev_repro.study.resolved import resolve_recipe

    planned = resolve_plan(resolve_recipe(recipe, apply_lock=False))
    again = Plan.from_json(json.loads(json.dumps(planned.to_json())))
    assert again.to_json() == planned.to_json()
    assert [s.label() for s in again.passes[0].steps] == [s.label() for s in planned.passes[0].steps]


def test_an_edited_plan_that_contradicts_itself_is_refused():
    from openjev_repro.study.planner import resolve_plan
    from openjev_repro.study.resolved import resolve_recipe

    data = resolve_plan(resolve_recipe(REPO / "recipes" / "demo.yaml", apply_lock=False)).to_json()
    data["backends"][0]["stop_order"] = ["nothing"]
    with pytest.raises(EvidenceError, match=r"p.json: .*stop_order .* - at `\$.backends\[0\]`"):
        Plan.from_json(data, "p.json")
    data = resolve_plan(resolve_recipe(REPO / "recipes" / "demo.yaml", apply_lock=False)).to_json()
    data["passes"][0]["steps"][-1]["pass"] = 0
    with pytest.raises(EvidenceError, match=r"at `\$.passes\[0\].steps\[\d+\]`"):
        Plan.from_json(data, "p.json")

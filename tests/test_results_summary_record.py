"""summary.json's record (evidence/summary.py): every committed run's summary decodes into `Summary` and
writes itself back byte for byte, the summary recomputed from its rows is that same record, and a summary
of a wrong shape is one EvidenceError naming the field."""

from pathlib import Path

import pytest

from openjev_repro.errors import EvidenceError
from openjev_repro.evidence.files import json_text, read_json
from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.evidence.summary import Summary, read_summary
from openjev_repro.results.energy import GPU_FILE, read_gpu_events
from openjev_repro.results.row_table import read_table
from openjev_repro.results.statistics import summarize

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.parent for p in (ROOT / "results").glob("**/summary.json"))


@pytest.mark.parametrize("run", COMMITTED, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_a_committed_summary_decodes_and_writes_itself_back_byte_for_byte(run):
    text = (run / "summary.json").read_text(encoding="utf-8")
    assert json_text(read_summary(run / "summary.json").to_json(), indent=2, sort_keys=True) == text


@pytest.mark.parametrize("run", COMMITTED[:3], ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_the_summary_recomputed_from_a_committed_runs_rows_is_its_record(run):
    gpu = read_gpu_events(run / GPU_FILE) if (run / GPU_FILE).is_file() else None
    assert summarize(read_table(run / "rows.jsonl"), load_recipe(run / "recipe.yaml"), gpu=gpu) == read_summary(
        run / "summary.json")


@pytest.mark.parametrize(("edit", "field"), [
    (lambda s: s["workloads"]["mixed"]["backends"]["reference-raw"]["overall"].update(n=-1), "overall.n"),
    (lambda s: s["gates"][0].update(passed="yes"), "gates[0].passed"),
    (lambda s: s["workloads"]["mixed"].update(extra=1), "extra"),
    (lambda s: s["workloads"]["mixed"]["backends"]["reference-raw"]["measured"][0].update({"pass": 2**70}), "pass"),
])
def test_a_summary_of_a_wrong_shape_is_one_evidence_error_naming_the_field(edit, field):
    data = read_json(ROOT / "results/h200-fast-27b-shape/run/summary.json")
    edit(data)
    with pytest.raises(EvidenceError, match="summary.json is not a summary this tool reads") as caught:
        Summary.decode(data)
    assert field in str(caught.value) and "\n" not in str(caught.value)

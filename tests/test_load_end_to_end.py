"""A load study end to end against a real loopback backend: summary.json's load section, the report's
per-level table and plot, `verify`'s per-level checks and `compare` level by level."""

from __future__ import annotations

import json

import pytest
import yaml
from invoking import invoke
from studykit import scripted_backend, write_study

from openjev_repro.manifest.keys import generate_keypair

pytest.importorskip("openjev_repro.study.load_levels", reason="the load runner (lane 29a) is not in this tree")

from openjev_repro.orchestrator.runner import StudyOptions, run_study

LOAD = {"closed": [1, 2], "open": {"rates_per_s": [50.0], "arrivals": "fixed"}, "latency_bound_ms": 1000}


def test_a_load_study_is_summarized_reported_verified_and_compared_per_level(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=6)
    data = yaml.safe_load(recipe.read_text())
    data["workloads"][0]["load"] = LOAD
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    keys = tmp_path / "keys"
    generate_keypair(keys)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", key_path=keys / "openjev-repro.key"))

    load = json.loads(run.file("summary.json").read_text())["load"]["workloads"]["mixed"]
    assert [lv["level"] for lv in load["levels"]] == ["closed-c1", "closed-c2", "open-r50"]
    levels = load["backends"]["one"]
    assert [(lv["requests"], lv["errors"], [p["pass"] for p in lv["passes"]]) for lv in levels] == [
        (12, 0, [1, 2]), (12, 0, [3, 4]), (12, 0, [5, 6])]
    assert [lv["connections"] for lv in levels] == [1, 2, 6]  # open loop: one sender per request here
    assert levels[2]["latency_from"] == "schedule" and levels[2]["schedule"]["scheduled"] == 12
    assert all(lv["throughput_per_s"] > 0 and lv["within_bound"] == 12 for lv in levels)

    report = run.file("report.md").read_text()
    assert "## Load levels" in report and "| one | open-r50 | 50 requests/s, fixed arrivals (open loop); schedule drew 50.00/s | 12 / 12 |" in report
    assert run.file("latency_vs_load.png").read_bytes().startswith(b"\x89PNG")

    verified = invoke("verify", "--run", str(run.path), "--pubkey", str(keys / "openjev-repro.pub"), timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    lines = verified.stdout.splitlines()
    assert any(line.startswith("PASS") and "load levels recomputed" in line and "3 (backend, level)" in line
               for line in lines)

    compared = invoke("compare", "--baseline", str(run.path), "--candidate", str(run.path), timeout=120)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "Per load level (open loop: latency from the scheduled send):" in compared.stdout
    assert "| open-r50 |" in compared.stdout

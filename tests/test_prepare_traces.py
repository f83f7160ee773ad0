"""Opt-in traces: planned from the published token counts, skipped with a record without nsys,
and run through a command prefix with a stand-in `nsys` (Nsight needs an NVIDIA driver)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.study.traces import plan_traces, run_traces

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes/open-jev-h200-packed-silu-2026-10-02.yaml"
COUNTS = [110] * 6 + [107] + [90] * 42 + [3399, 936] + [200] * 23  # positions 7, 50, 51 as published


def _enabled(tmp: Path):
    path = tmp / RECIPE.name
    path.write_text(RECIPE.read_text().replace("  enabled: false", "  enabled: true"))
    return load_recipe(path)


def test_plan_is_empty_unless_enabled():
    assert plan_traces(load_recipe(RECIPE), COUNTS) == []


def test_plan_picks_published_positions(tmp_path):
    items = plan_traces(_enabled(tmp_path), COUNTS)
    assert len(items) == 18
    assert {(i.tokens, i.position) for i in items} == {(107, 7), (3399, 50), (936, 51)}
    assert items[0].output == "traces/native-scalar-107tok-1" and items[0].wrap == "worker"


def test_skipped_without_nsys_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no nsys here, even on a host with Nsight
    recipe = _enabled(tmp_path)
    items = plan_traces(recipe, COUNTS)
    record = run_traces(recipe, items, tmp_path / "run", launch=None, send=None, nsys=None)
    saved = json.loads((tmp_path / "run/traces/skipped.json").read_text())
    assert saved == record
    assert saved["status"] == "skipped" and "nsys" in saved["reason"] and saved["format_version"] == 1
    assert saved["planned"] == [i.to_dict() for i in items] and len(items) == 18
    assert not (tmp_path / "run/traces/traces.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_traces_wrap_the_launch_in_the_nsys_prefix(tmp_path):
    # Stand-in for nsys: records its arguments, writes the report file, runs the wrapped command.
    fake = tmp_path / "nsys-standin"
    fake.write_text("#!/bin/sh\nout=''\nwhile [ \"$1\" != '--force-overwrite=false' ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
                    "shift\necho \"$@\" > \"$out.args\"; touch \"$out.nsys-rep\"; exec \"$@\"\n")
    fake.chmod(0o755)
    recipe = _enabled(tmp_path)
    items = plan_traces(recipe, COUNTS)[:2]
    run_dir = tmp_path / "run"
    sent: list[tuple[str, int]] = []

    @contextmanager
    def launch(backend, prefix, wrap):
        port = _free_port()
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(url, timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)

    def send(url, position):
        urllib.request.urlopen(url, timeout=5).close()
        sent.append((url, position))

    record = run_traces(recipe, items, run_dir, launch, send, nsys=str(fake))
    assert record["status"] == "done" and [p for _, p in sent] == [7, 7]
    first = record["traces"][0]
    assert first["reports"] == ["native-scalar-107tok-1.args", "native-scalar-107tok-1.nsys-rep"]
    assert "http.server" in (run_dir / "traces/native-scalar-107tok-1.args").read_text()
    saved = json.loads((run_dir / "traces/traces.json").read_text())
    assert saved["format_version"] == 1 and len(saved["traces"]) == 2
    assert os.path.exists(run_dir / "traces/native-scalar-107tok-2.nsys-rep")

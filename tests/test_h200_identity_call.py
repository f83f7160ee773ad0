"""scripts/h200-identity-call.sh, every part, on the CPU: the demo's fast backend stands in for the H200's
fast backends, wrapped by two DOUBLES of what a GPU backend does to its caches (tests/servers/): a real
torch.compile on the CPU (a real Inductor cache) and Triton-cache-shaped files. produce packs and pins,
study and rerun run the pinned recipe signed and must find both caches unchanged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml
from studykit import sha256

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "h200-identity-call.sh"
SERVERS = Path(__file__).parent / "servers"
BACKEND = "reference-fast"


def _recipes(tmp_path: Path) -> tuple[Path, Path]:
    demo = yaml.safe_load((REPO / "recipes" / "demo.yaml").read_text())
    (fast,) = [b for b in demo["backends"] if b["name"] == BACKEND]
    fast.pop("image")
    fast["command"] = ["{python}", str(SERVERS / "inductor_compile_double.py"),
                       "{python}", str(SERVERS / "triton_cache_double.py"), *fast["command"]]
    demo.update(backends=[fast], gates=[], inputs={**demo["inputs"], "root": "inputs"})
    demo["protocol"].update(feasibility_passes=0, measured_passes=1)
    fast["kernel_caches"] = {"kinds": ["triton", "inductor"]}
    caches = tmp_path / "caches.yaml"
    caches.write_text(yaml.safe_dump({**demo, "study": {**demo["study"], "id": "demo-caches"}}, sort_keys=False))
    demo["protocol"].update(feasibility_passes=1, measured_passes=2)
    fast["kernel_caches"] = {"kinds": ["triton", "inductor"],
                             "pinned": [{"archive": f"kernel-caches/{BACKEND}.tar.xz", "sha256": "0" * 64}]}
    signed = tmp_path / "signed.yaml"
    signed.write_text(yaml.safe_dump(demo, sort_keys=False, default_flow_style=None, width=1000))
    return caches, signed


def _call(part: str, tmp_path: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    caches, signed = tmp_path / "caches.yaml", tmp_path / "signed.yaml"
    variables = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "RECIPE": str(signed),
                 "CACHES_RECIPE": str(caches), "ARCHIVES": str(tmp_path / "inputs" / "kernel-caches"),
                 "BACKENDS": BACKEND, "WORK": str(tmp_path / "work" / part), "FIXTURE": str(tmp_path / "inputs"),
                 "WHEELS": str(tmp_path / "no-wheels"), **env}
    return subprocess.run(["bash", str(SCRIPT), part], cwd=REPO, env=variables, capture_output=True, text=True,
                          timeout=900, check=False)


def _kernel_caches(archive: Path, tmp_path: Path) -> tuple[Path, dict]:
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
        (name,) = {m.name.split("/")[0] for m in tar.getmembers()}
    run = tmp_path / name
    return run, {c["kind"]: c for c in json.loads((run / "kernel_caches.json").read_text())["backends"][BACKEND]}


def test_the_identity_call_produces_pins_and_reruns_with_unchanged_caches_on_the_cpu(tmp_path, fixture_root):
    shutil.copytree(fixture_root, tmp_path / "inputs")
    _recipes(tmp_path)
    from openjev_repro.manifest.keys import generate_keypair

    private, public, _ = generate_keypair(tmp_path / "keys")

    produced = _call("produce", tmp_path, tmp_path / "out-a", SPLIT_BYTES="20000")  # pieces, as over 15 MiB
    assert produced.returncode == 0, produced.stdout[-3000:] + produced.stderr[-3000:]
    archive = tmp_path / "inputs" / "kernel-caches" / f"{BACKEND}.tar.xz"
    pieces = sorted((tmp_path / "out-a").glob(f"{archive.name}.part*"))
    assert len(pieces) == -(-archive.stat().st_size // 20000) > 1
    assert b"".join(p.read_bytes() for p in pieces) == archive.read_bytes()
    pinned = (tmp_path / "out-a" / "signed.yaml").read_text()
    assert sha256(archive) in pinned and "0" * 64 not in pinned
    assert pinned == (tmp_path / "signed.yaml").read_text()
    assert {p.name for p in (tmp_path / "out-a").iterdir()} - {p.name for p in pieces} == {
        "identity-call.log", "signed.yaml", "produce-run.tar.gz"}
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.startswith("inductor/fxgraph/") for n in names)  # the real Inductor cache of the CPU compile
    assert any(n.endswith(".autotune.json") for n in names)  # the Triton-shaped double

    for part, name in (("study", "run"), ("rerun", "rerun")):
        out = tmp_path / f"out-{part}"
        done = _call(part, tmp_path, out, KEY=str(private))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert {p.name for p in out.iterdir()} == {"identity-call.log", f"{name}.tar.gz"}
        run, caches = _kernel_caches(out / f"{name}.tar.gz", tmp_path / f"unpacked-{part}")
        for kind in ("triton", "inductor"):
            assert caches[kind]["archive_sha256"] == sha256(archive)
            assert caches[kind]["before"] == caches[kind]["after"] and caches[kind]["before"]["files"] > 0
        verified = subprocess.run([sys.executable, "-m", "invoke", "verify", "--run", str(run), "--pubkey",
                                   str(public)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_part_it_does_not_know_is_one_error_line(tmp_path):
    done = _call("host-b", tmp_path, tmp_path / "out")
    assert done.returncode == 2 and done.stderr.strip() == "error: part host-b: give host-a, produce, study or rerun"

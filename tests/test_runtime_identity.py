"""Runtime identity (issue 39 item 1): our backend reports in /health the shared objects mapped into it
(path, size, sha256), the versions as loaded, the kernel caches it was pointed at with their digests and
every autotuned choice in them; the study records it per backend in backends.json; verify checks its form."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from studykit import scripted_backend, write_study

from openjev_repro.audit.verify import verify_path
from openjev_repro.evidence.identity import RuntimeIdentity
from openjev_repro.hashing import tree_digest
from openjev_repro.manifest.run_manifest import write_manifest
from openjev_repro.orchestrator.runner import StudyOptions, run_study

SHA = "a" * 64


def _caches(tmp_path: Path) -> dict[str, str]:
    """Kernel caches shaped as Triton's and Inductor's (a DOUBLE: no GPU compiles here)."""
    triton = tmp_path / "triton" / "ABCDEF"
    triton.mkdir(parents=True)
    timings = [[{"kwargs": {"BT": 64}, "num_warps": 8, "num_stages": 2, "pre_hook": None}, [0.03]],
               [{"kwargs": {"BT": 16}, "num_warps": 4, "num_stages": 3, "pre_hook": None}, [0.01]]]
    (triton / "l2norm_fwd_kernel.autotune.json").write_text(json.dumps({"key": [128], "configs_timings": timings}))
    inductor = tmp_path / "inductor" / "ab"
    inductor.mkdir(parents=True)
    (inductor / "cabc.py").write_text("import triton\n\ndef triton_red_fused_mean_0(in_ptr0, xnumel):\n    pass\n")
    (inductor / "cabc.best_config").write_text(json.dumps({"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 8,
                                                          "time_taken_ms": 3.25, "found_by_coordesc": False}))
    return {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}


def _identity(server, timeout_s: float = 60) -> dict:
    """/health's runtime_identity once every mapped shared object is hashed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        identity = httpx.get(f"{server.url}/health", timeout=10).json()["runtime_identity"]
        if identity["pending"] == 0:
            return identity
        time.sleep(0.2)
    raise AssertionError("the backend never finished hashing its shared objects")


def test_health_reports_the_shared_objects_versions_caches_and_autotune_choices(start_server, fixture_checkpoint,
                                                                                tmp_path):
    env = _caches(tmp_path)
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--device", "cpu"], env=env)
    server.wait_ready()
    identity = _identity(server)
    RuntimeIdentity.decode(identity)  # its own record type accepts it
    libraries = {lib["path"]: lib for lib in identity["libraries"]}
    assert len(libraries) >= 20  # a torch process maps dozens
    torch_lib = next(path for path in libraries if Path(path).name.startswith("libtorch_cpu"))
    assert libraries[torch_lib]["sha256"] == hashlib.sha256(Path(torch_lib).read_bytes()).hexdigest()
    assert libraries[torch_lib]["size"] == Path(torch_lib).stat().st_size
    import torch

    assert identity["versions"]["torch"] == str(torch.__version__) and identity["versions"]["cublas"] is None
    caches = {c["kind"]: c for c in identity["kernel_caches"]}
    assert caches["triton"]["sha256"] == tree_digest(env["TRITON_CACHE_DIR"])["sha256"]
    assert caches["inductor"]["env"] == "TORCHINDUCTOR_CACHE_DIR" and caches["inductor"]["files"] == 2
    assert identity["autotune"] == {
        "inductor/cabc/triton_red_fused_mean_0": {"RBLOCK": 1024, "XBLOCK": 1, "found_by_coordesc": False,
                                                  "num_warps": 8},
        "triton/ABCDEF/l2norm_fwd_kernel": {"BT": 16, "maxnreg": None, "num_ctas": None, "num_stages": 3,
                                            "num_warps": 4}}


@pytest.mark.parametrize("change", [
    lambda d: d["libraries"][0].update(sha256="A" * 64),
    lambda d: d["libraries"][0].update(sha256=SHA[:63]),
    lambda d: d["libraries"][0].update(path="/lib/x.so\nerror: forged"),
    lambda d: d["libraries"][0].update(size=float("nan")),
    lambda d: d["libraries"].reverse(),
    lambda d: d.update(extra=1),
    lambda d: d["versions"].update(torch=2.11),
    lambda d: d["kernel_caches"].append({"kind": "cuda", "env": "X", "files": 1, "sha256": SHA})])
def test_a_malformed_runtime_identity_is_refused_by_its_record_type(change):
    good = {"format_version": 1, "libraries": [{"path": "/a/liba.so", "size": 1, "sha256": SHA},
                                               {"path": "/b/libb.so", "size": 2, "sha256": SHA}],
            "versions": {"torch": "2.11.0"}, "kernel_caches": [], "autotune": {}, "pending": 0}
    RuntimeIdentity.decode(json.loads(json.dumps(good)))
    change(good)
    with pytest.raises(ValueError):
        RuntimeIdentity.decode(good)


def test_a_foreign_backend_is_recorded_as_reporting_none_and_verify_checks_the_form(tmp_path):
    run = run_study(StudyOptions(recipe_path=write_study(tmp_path, [scripted_backend("one")], n=2),
                                 out_dir=tmp_path / "runs"))
    backends = json.loads(run.file("backends.json").read_text())
    assert "runtime_identity" not in backends["backends"]["one"]  # absent: the backend reported none
    assert "runtime identity" not in {c.name for c in verify_path(run.path, allow_unsigned=True)}

    identity = {"format_version": 1, "libraries": [{"path": "/lib/libz.so.1", "size": 9, "sha256": SHA}],
                "versions": {}, "kernel_caches": [], "autotune": {}, "pending": 0}
    for value, passed in ((identity, True), ({**identity, "libraries": [{"path": "/lib/libz.so.1", "size": 9,
                                                                          "sha256": "xyz"}]}, False)):
        backends["backends"]["one"]["runtime_identity"] = value
        run.file("backends.json").write_text(json.dumps(backends))
        run.file("manifest.dsse.json").unlink()
        write_manifest(run.path, key_path=None)
        (check,) = [c for c in verify_path(run.path, allow_unsigned=True) if c.name == "runtime identity"]
        assert check.passed is passed, check.detail
    assert "runtime_identity.libraries[0].sha256" in check.detail


def test_the_scan_of_maps_lists_each_mapped_shared_object_once(tmp_path):
    from openjev_repro.backend.runtime_identity import mapped_libraries

    maps = tmp_path / "maps"
    lib = Path(sys.executable).resolve()  # any real file stands in for a mapped path
    so = tmp_path / "libfake.so.1"
    so.write_bytes(b"\x7fELF")
    sock = tmp_path / "x.sock"
    sock.write_bytes(b"")
    maps.write_text(f"7f00-7f01 r--p 0 08:01 1 {so}\n7f01-7f02 r-xp 0 08:01 1 {so}\n7f05-7f06 r--p 0 08:01 4 {sock}\n"
                    f"7f02-7f03 r--p 0 08:01 2 {lib}\n7f03-7f04 rw-p 0 00:00 0 [heap]\n"
                    f"7f04-7f05 r--p 0 08:01 3 {tmp_path}/gone.so (deleted)\n")
    assert mapped_libraries(maps) == [so]

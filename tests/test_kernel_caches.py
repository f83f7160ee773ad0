"""Kernel caches as pinned inputs (issue 39): fresh caches beside the run, packed with deterministic
bytes by `invoke kernel-cache`, pinned in the next recipe, unchanged or refused. The backend is the
scripted loopback server wrapped by tests/servers/triton_cache_double.py, a DOUBLE of what a GPU
backend writes into Triton's and Inductor's caches (no GPU here)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from studykit import scripted_backend, sha256, write_study

from openjev_repro.backend.runtime_identity import cached_autotune_choices
from openjev_repro.errors import InputMismatch, RecipeError, RunIncomplete
from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.orchestrator.runner import StudyOptions, run_study
from openjev_repro.study.kernel_caches import KernelCachesRecord, caches_dir, pack_caches, unpack_archive

DOUBLE = Path(__file__).parent / "servers" / "triton_cache_double.py"
REPO = Path(__file__).resolve().parents[1]


def _backend(name: str = "one", caches: dict | None = None, **env: str) -> dict:
    backend = scripted_backend(name)
    backend["command"] = [sys.executable, str(DOUBLE), *backend["command"]]
    backend["env"] = {**backend["env"], **env}
    backend["kernel_caches"] = caches or {"kinds": ["triton", "inductor"]}
    return backend


def _study(tmp_path: Path, backends: list[dict], **extra) -> Path:
    return write_study(tmp_path, backends, n=2, **extra)


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=False)


def _recorded(run: RunDir, name: str = "one") -> dict:
    return {c.kind: c for c in (KernelCachesRecord.read(run) or KernelCachesRecord()).backends[name]}


def test_fresh_caches_beside_the_run_are_recorded_packed_deterministically_and_pinned_unchanged(tmp_path):
    first = run_study(StudyOptions(recipe_path=_study(tmp_path / "a", [_backend()]), out_dir=tmp_path / "runs"))
    caches = _recorded(first)
    assert caches["triton"].before.files == 0 and caches["triton"].after.files == 8  # 2 kernels x 4 files (with the group file)
    assert caches["inductor"].after.files == 4 and not caches["inductor"].pinned
    assert (caches_dir(first.path) / "one" / "inductor").is_dir()
    assert not any("kernel-caches" in p.as_posix() for p in first.evidence_files())  # beside, not in, the run

    out = tmp_path / "pins" / "inputs" / "one.tar.xz"
    packed = _invoke("kernel-cache", "--run", str(first.path), "--backend", "one", "--out", str(out))
    assert packed.returncode == 0, packed.stderr
    assert f"sha256 {sha256(out)}" in packed.stdout
    again = _invoke("kernel-cache", "--run", str(first.path), "--backend", "one", "--out", str(tmp_path / "b.tar.xz"))
    assert again.returncode == 0 and (tmp_path / "b.tar.xz").read_bytes() == out.read_bytes()
    with tarfile.open(out) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}

    pinned = {"kinds": ["triton", "inductor"], "pinned": [{"archive": "one.tar.xz", "sha256": sha256(out)}]}
    recipe = _study(tmp_path / "pins", [_backend(caches=pinned)])
    second = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    caches = _recorded(second)
    assert caches["triton"].pinned and caches["triton"].archive == "one.tar.xz"
    assert caches["triton"].before.sha256 == _recorded(first)["triton"].after.sha256
    assert caches["triton"].changed is False and caches["inductor"].changed is False
    report = second.file("report.md").read_text()
    assert "| one | triton | `one.tar.xz` (" in report and "Every pinned cache (2) was unchanged" in report


def test_a_pinned_cache_made_in_a_folder_that_is_gone_is_still_a_hit_and_packs_location_free(tmp_path):
    """Triton's group files name their kernels' files by absolute path, and a kernel whose listed paths do
    not exist is compiled again. The producing run's folder is gone on any other host (removed here), so
    the pinned cache must be pointed at where it lands: unchanged, with no kernel written again."""
    import shutil

    first = run_study(StudyOptions(recipe_path=_study(tmp_path / "a", [_backend()]), out_dir=tmp_path / "runs"))
    produced = caches_dir(first.path) / "one" / "triton"
    out = tmp_path / "pins" / "inputs" / "one.tar.xz"
    pack_caches({"triton": produced}, out)
    moved = tmp_path / "elsewhere" / "triton"  # the same cache in another folder packs to the same bytes
    shutil.copytree(produced, moved)
    for group in moved.rglob("__grp__*.json"):  # as Triton would have written it there
        group.write_text(group.read_text().replace(str(produced), str(moved)))
    pack_caches({"triton": moved}, tmp_path / "again.tar.xz")
    assert (tmp_path / "again.tar.xz").read_bytes() == out.read_bytes()
    with tarfile.open(out) as tar:
        assert not any(str(tmp_path) in tar.extractfile(m).read().decode() for m in tar if m.isreg())
    shutil.rmtree(caches_dir(first.path))  # "another host": the producing folder does not exist there

    pinned = {"kinds": ["triton"], "pinned": [{"archive": "one.tar.xz", "sha256": sha256(out)}]}
    compiled = tmp_path / "compiled.txt"
    recipe = _study(tmp_path / "pins", [_backend(caches=pinned, DOUBLE_COMPILED=str(compiled))])
    second = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs2"))
    assert not compiled.exists()  # every kernel found where the study put it
    cache = _recorded(second)["triton"]
    assert cache.changed is False and cache.before.files == 8 and cache.before.paths == "relative"
    assert cache.before.sha256 == _recorded(first)["triton"].after.sha256  # location-free digests
    landed = caches_dir(second.path) / "one" / "triton"
    for group in landed.rglob("__grp__*.json"):  # every child listed where it is now, and there
        children = json.loads(group.read_text())["child_paths"].values()
        assert children and all(Path(p).parent == group.parent and Path(p).is_file() for p in children)


def test_a_group_file_naming_paths_elsewhere_is_pointed_into_its_own_folder_when_unpacked(tmp_path):
    """A hostile or foreign archive's group file may list any path (/etc/passwd, another run); unpacking points
    each child at the group file's own folder, by file name only, so Triton never reads outside the cache."""
    archive = tmp_path / "a.tar.xz"
    group = json.dumps({"child_paths": {"k.cubin": "/etc/passwd", "k.json": "../../../outside/k.json"}}).encode()
    with tarfile.open(archive, "w:xz") as tar:
        for name, data in (("triton/H/__grp__k.json", group), ("triton/H/k.cubin", b"cubin"), ("triton/H/k.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    unpack_archive(archive, sha256(archive), tmp_path / "into")
    children = json.loads((tmp_path / "into" / "triton" / "H" / "__grp__k.json").read_text())["child_paths"]
    assert children == {"k.cubin": str(tmp_path / "into" / "triton" / "H" / "passwd"),
                        "k.json": str(tmp_path / "into" / "triton" / "H" / "k.json")}


def test_a_pinned_cache_that_changes_stops_the_study_unless_drift_is_allowed(tmp_path):
    first = run_study(StudyOptions(recipe_path=_study(tmp_path / "a", [_backend()]), out_dir=tmp_path / "runs"))
    out = tmp_path / "pins" / "inputs" / "one.tar.xz"
    pack_caches({"triton": caches_dir(first.path) / "one" / "triton"}, out)
    pinned = {"kinds": ["triton"], "pinned": [{"archive": "one.tar.xz", "sha256": sha256(out)}]}
    # Another autotuned choice on "this host": the double writes new entries into the pinned cache.
    recipe = _study(tmp_path / "pins", [_backend(caches=pinned, DOUBLE_CONFIG="BT=16,num_warps=8")])
    with pytest.raises(RunIncomplete, match=r"one: the pinned triton cache changed while it ran \(one.tar.xz: "
                                            r"8 files [0-9a-f]{12} before, 16 files [0-9a-f]{12} after; "
                                            r"0 rewritten, 8 added, 0 removed: [0-9a-f]{52}/"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs2"))
    (run,) = (tmp_path / "runs2").glob("test-study-*[0-9a-f]")
    assert RunDir(run).state_record().status == "incomplete"
    allowed = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs3", allow_environment_drift=True))
    assert allowed.state_record().status == "complete"
    assert _recorded(allowed)["triton"].changed is True
    changes = _recorded(allowed)["triton"].changes
    assert (changes.added, changes.removed, changes.rewritten) == (8, 0, 0) and len(changes.names) == 8
    check = json.loads(allowed.file("environment_check.json").read_text())
    assert any("the pinned triton cache changed" in d for d in check["differences"])
    assert "the pinned triton cache changed" in allowed.file("report.md").read_text()  # the drift banner


def test_a_pinned_cache_rewritten_in_place_names_the_files_and_keeps_the_choices(tmp_path):
    """The same files with other bytes (autotune timings written again, the choice the same): still drift,
    and the record names exactly the rewritten files, so a reader can tell it from a new kernel."""
    first = run_study(StudyOptions(recipe_path=_study(tmp_path / "a", [_backend()]), out_dir=tmp_path / "runs"))
    out = tmp_path / "pins" / "inputs" / "one.tar.xz"
    pack_caches({"triton": caches_dir(first.path) / "one" / "triton"}, out)
    pinned = {"kinds": ["triton"], "pinned": [{"archive": "one.tar.xz", "sha256": sha256(out)}]}
    recipe = _study(tmp_path / "pins", [_backend(caches=pinned, DOUBLE_RETIME="0.02")])
    with pytest.raises(RunIncomplete, match=r"8 files [0-9a-f]{12} before, 8 files [0-9a-f]{12} after; "
                                            r"2 rewritten, 0 added, 0 removed: [0-9a-f]{52}/\w+\.autotune\.json"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs2"))
    allowed = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs3", allow_environment_drift=True))
    changes = _recorded(allowed)["triton"].changes
    assert (changes.added, changes.removed, changes.rewritten) == (0, 0, 2)
    report = allowed.file("report.md").read_text()
    assert "| 8 / 8 |" in report and "| **CHANGED**: 2 rewritten, 0 added, 0 removed: " in report
    assert "Every pinned cache" not in report
    assert sorted(Path(n).name for n in changes.names) == ["chunk_fwd.autotune.json", "fused_norm.autotune.json"]
    choices = {kind: cached_autotune_choices({"triton": caches_dir(run.path) / "one" / "triton"})
               for kind, run in (("first", first), ("rewritten", allowed))}
    assert choices["first"] == choices["rewritten"] and len(choices["first"]) == 2  # the same kernels chosen


def test_a_pinned_archive_with_another_digest_stops_the_study_before_the_backend_starts(tmp_path):
    out = tmp_path / "pins" / "inputs" / "one.tar.xz"
    (tmp_path / "empty").mkdir()
    pack_caches({"triton": tmp_path / "empty"}, out)
    pinned = {"kinds": ["triton"], "pinned": [{"archive": "one.tar.xz", "sha256": "0" * 64}]}
    recipe = _study(tmp_path / "pins", [_backend(caches=pinned)])
    with pytest.raises(RunIncomplete, match=r"one.tar.xz has sha256 [0-9a-f]{64}, the recipe pins 0{64}"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    assert not list((tmp_path / "runs").glob("*/logs/one.log"))  # never started


def _recipe_error(tmp_path: Path, backends: list[dict], extra: dict | None = None) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(_study(tmp_path, backends, extra=extra))
    return str(caught.value)


def test_pins_on_a_backend_the_study_does_not_launch_are_one_recipe_error(tmp_path):
    url = {"name": "remote", "url": "http://127.0.0.1:8787"}
    message = _recipe_error(tmp_path / "a", [{**url, "kernel_caches": {"kinds": ["triton"]}}])
    assert "reached by `url`, so kernel_caches" in message and "\n" not in message
    message = _recipe_error(tmp_path / "b", [{**url, "environment": {"triton_cache": {"dir": "t", "sha256": "0" * 64}}}])
    assert "environment.triton_cache" in message
    message = _recipe_error(tmp_path / "c", [url], extra={"environment": {"triton_cache": {"dir": "t", "sha256": "0" * 64}}})
    assert "backend 'remote' is reached by `url`" in message
    twice = _backend(caches={"kinds": ["triton"]}, TRITON_CACHE_DIR="/tmp/x")
    assert "`env` cannot set it too" in _recipe_error(tmp_path / "d", [twice])
    assert "repeat" in _recipe_error(tmp_path / "e", [_backend(caches={"kinds": ["triton", "triton"]})]).lower()
    docker = {**_backend(caches={"kinds": ["inductor"]}), "runtime": "docker", "image": "x"}
    assert "need the local runtime" in _recipe_error(tmp_path / "f", [docker])


def test_the_cli_refuses_a_url_pin_in_one_error_line(tmp_path):
    recipe = _study(tmp_path, [{"name": "remote", "url": "http://127.0.0.1:8787", "kernel_caches": {"kinds": ["triton"]}}])
    done = _invoke("plan", "--recipe", str(recipe))
    assert done.returncode == 1 and done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def _archive(tmp_path: Path, members: list[tarfile.TarInfo]) -> Path:
    path = tmp_path / "hostile.tar"
    with tarfile.open(path, "w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isreg() else None)
    return path


@pytest.mark.parametrize(("name", "kind", "words"), [
    ("../escape", tarfile.REGTYPE, "not under triton/ or inductor/"),
    ("/abs/file", tarfile.REGTYPE, "not under triton/ or inductor/"),
    ("elsewhere/file", tarfile.REGTYPE, "not under triton/ or inductor/"),
    ("triton/link", tarfile.SYMTYPE, "is a link or device"),
    ("triton/dev", tarfile.CHRTYPE, "is a link or device")])
def test_hostile_archive_members_are_refused_before_anything_is_written(tmp_path, name, kind, words):
    member = tarfile.TarInfo(name)
    member.type, member.size = kind, 1 if kind == tarfile.REGTYPE else 0
    member.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
    good = tarfile.TarInfo("triton/ok")
    good.size = 1
    archive = _archive(tmp_path, [good, member])
    with pytest.raises(InputMismatch, match=words):
        unpack_archive(archive, sha256(archive), tmp_path / "into")
    assert not (tmp_path / "into" / "triton" / "ok").exists()


def test_kernel_cache_task_errors_are_one_line(tmp_path):
    run = run_study(StudyOptions(recipe_path=_study(tmp_path / "a", [_backend()]), out_dir=tmp_path / "runs"))
    out = tmp_path / "x.tar.xz"
    cases = [(["--backend", "nope"], "The run records no kernel caches for backend 'nope'"),
             (["--backend", "one", "--kind", "cuda"], "--kind 'cuda': give triton or inductor")]
    for args, words in cases:
        done = _invoke("kernel-cache", "--run", str(run.path), "--out", str(out), *args)
        assert done.returncode == 1 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    out.write_text("keep me")
    done = _invoke("kernel-cache", "--run", str(run.path), "--backend", "one", "--out", str(out))
    assert done.returncode == 1 and "never overwritten" in done.stderr and out.read_text() == "keep me"


def test_pin_rewrites_only_the_digest_of_the_named_archive(tmp_path):
    run = run_study(StudyOptions(recipe_path=_study(tmp_path / "a", [_backend()]), out_dir=tmp_path / "runs"))
    pinned = {"kinds": ["triton", "inductor"], "pinned": [{"archive": "one.tar.xz", "sha256": "0" * 64}]}
    recipe = _study(tmp_path / "pins", [_backend(caches=pinned)])
    # Leaf mappings in flow style: `- {archive: one.tar.xz, sha256: 000…}` on one line, as the committed recipes.
    recipe.write_text(yaml.safe_dump(yaml.safe_load(recipe.read_text()), sort_keys=False, default_flow_style=None,
                                     width=1000))
    before = recipe.read_text()
    out = tmp_path / "pins" / "inputs" / "one.tar.xz"
    done = _invoke("kernel-cache", "--run", str(run.path), "--backend", "one", "--out", str(out), "--pin", str(recipe))
    assert done.returncode == 0, done.stderr
    after = recipe.read_text()
    assert after == before.replace("0" * 64, sha256(out))
    assert json.loads(json.dumps(load_recipe(recipe).backends[0].kernel_caches.pinned[0].sha256)) == sha256(out)

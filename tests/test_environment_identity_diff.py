"""compare names what actually ran (issue 39 item 3, issue 41 item 7): shared objects added, removed or
changed, kernel cache digests, autotuned choices kernel by kernel (which explain a probability drift), and
the machines' load averages, on two real (scripted-backend) runs whose recorded files are then edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from studykit import scripted_backend, write_study

from openjev_repro.audit.compare import compare_runs, to_markdown
from openjev_repro.errors import EvidenceError
from openjev_repro.orchestrator.runner import StudyOptions, run_study

A, B, C = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("identitydiff")
    recipe = write_study(tmp, [scripted_backend("one")], n=3)
    return (run_study(StudyOptions(recipe_path=recipe, out_dir=tmp / "runs")).path,
            run_study(StudyOptions(recipe_path=recipe, out_dir=tmp / "runs")).path)


def _edit(path, name, change):
    data = json.loads((path / name).read_text())
    change(data)
    (path / name).write_text(json.dumps(data))


def _identity(libraries: dict[str, str], autotune: dict, caches: dict[str, str], paths: str | None = "relative") -> dict:
    """A runtime identity as /health reports it; `paths=None`: cache digests as reported before 2026-12-05."""
    where = {} if paths is None else {"paths": paths}
    return {"format_version": 1, "pending": 0, "versions": {"torch": "2.11.0"},
            "libraries": [{"path": p, "size": 1, "sha256": s} for p, s in sorted(libraries.items())],
            "kernel_caches": [{"kind": k, "env": {"triton": "TRITON_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR"}[k],
                               "files": 3, "sha256": s, **where} for k, s in caches.items()],
            "autotune": autotune}


def _flip_probabilities(run):
    rows = []
    for line in (run / "rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("phase") == "measured" and row.get("probability") is not None:
            row["probability"] = min(1.0, row["probability"] + 0.001)
        rows.append(json.dumps(row))
    (run / "rows.jsonl").write_text("\n".join(rows) + "\n")


def _copies(two_runs, tmp_path):
    return [shutil.copytree(p, tmp_path / n) for p, n in zip(two_runs, "ab", strict=True)]


def test_libraries_caches_and_autotune_choices_are_named_and_explain_a_drift(two_runs, tmp_path):
    a, b = _copies(two_runs, tmp_path)
    base = _identity({"/usr/lib/libcublas.so.12": A, "/usr/lib/libz.so.1": A,
                      "/r/x.kernel-caches/one/triton/h1/__triton_launcher.so": A},
                     {"inductor/cabc/triton_red_fused_0": {"XBLOCK": 1, "num_warps": 8},
                      "triton/H/l2norm_fwd_kernel": {"BT": 16, "num_warps": 4}}, {"triton": A, "inductor": A})
    cand = _identity({"/usr/lib/libcublas.so.12": B, "/usr/lib/libnccl.so.2": A,
                      "/s/y.kernel-caches/one/triton/h1/__triton_launcher.so": A},
                     {"inductor/cabc/triton_red_fused_0": {"XBLOCK": 2, "num_warps": 8},
                      "triton/H/l2norm_fwd_kernel": {"BT": 16, "num_warps": 4}}, {"triton": A, "inductor": C})
    _edit(a, "backends.json", lambda d: d["backends"]["one"].update(runtime_identity=base))
    _edit(b, "backends.json", lambda d: d["backends"]["one"].update(runtime_identity=cand))
    _flip_probabilities(b)
    result = compare_runs(a, b)
    texts = [d["text"] for d in result.to_json()["pairs"][0]["environment"]["differences"]]
    assert "libraries: only the baseline mapped /usr/lib/libz.so.1" in texts
    assert "libraries: only the candidate mapped /usr/lib/libnccl.so.2" in texts
    assert f"libraries: /usr/lib/libcublas.so.12 has sha256 {A[:12]} vs {B[:12]}" in texts
    assert not any("__triton_launcher" in t for t in texts)  # the same place in each run's own cache
    assert f"kernel_caches.inductor: {A} vs {C}" in texts and not any("kernel_caches.triton" in t for t in texts)
    assert texts.count("autotune.inductor/cabc/triton_red_fused_0: XBLOCK: 1, num_warps: 8 vs XBLOCK: 2, "
                       "num_warps: 8") == 1
    assert not any("l2norm" in t for t in texts)  # the same choice is no difference
    (explained,) = result.to_json()["verdict"]["explanations"]
    assert "can be explained by autotuned kernels chose differently (1 listed below)" in explained
    assert "autotune.inductor/cabc/triton_red_fused_0" in to_markdown(result)


def test_a_cache_digest_hashed_with_absolute_paths_says_so_beside_a_location_free_one(two_runs, tmp_path):
    a, b = _copies(two_runs, tmp_path)
    _edit(a, "backends.json", lambda d: d["backends"]["one"].update(runtime_identity=_identity({}, {}, {"triton": A},
                                                                                              paths=None)))
    _edit(b, "backends.json", lambda d: d["backends"]["one"].update(runtime_identity=_identity({}, {}, {"triton": A})))
    texts = [d["text"] for d in compare_runs(a, b).to_json()["pairs"][0]["environment"]["differences"]]
    assert f"kernel_caches.triton: {A} (group files hashed with their absolute paths) vs {A}" in texts


def test_the_committed_rerun_names_the_old_digest_method_but_not_for_an_empty_cache():
    """results/h200-fast-27b-shape: run/ (2026-12-04) hashed its caches as written, rerun/ (2026-12-05)
    location-free; an empty Inductor cache has one digest either way."""
    root = Path(__file__).resolve().parents[1] / "results" / "h200-fast-27b-shape"
    texts = [d["text"] for pair in compare_runs(root / "run", root / "rerun").to_json()["pairs"]
             for d in pair["environment"]["differences"]]
    assert any(t.startswith("kernel_caches.triton: 1556d19f") and "absolute paths) vs 17278854" in t for t in texts)
    assert not any(t.startswith("kernel_caches.inductor") and "e3b0c442" in t for t in texts)


def test_a_long_list_of_differing_libraries_is_cut_at_eighty_columns_worth(two_runs, tmp_path):
    a, b = _copies(two_runs, tmp_path)
    _edit(a, "backends.json", lambda d: d["backends"]["one"].update(
        runtime_identity=_identity({f"/lib/lib{i:02d}.so": A for i in range(20)}, {}, {})))
    _edit(b, "backends.json", lambda d: d["backends"]["one"].update(runtime_identity=_identity({}, {}, {})))
    texts = [d["text"] for d in compare_runs(a, b).to_json()["pairs"][0]["environment"]["differences"]]
    assert [t for t in texts if t.startswith("libraries")][-1] == "libraries: and 14 more"


@pytest.mark.parametrize("pending", [0, 2])
def test_a_library_one_side_had_not_hashed_yet_is_no_difference(two_runs, tmp_path, pending):
    # /health lists only the libraries hashed so far (a large one on a loaded machine may still be pending):
    # one the other side lacks is "only mapped" when that side had hashed everything it mapped, not before.
    a, b = _copies(two_runs, tmp_path)
    _edit(a, "backends.json", lambda d: d["backends"]["one"].update(
        runtime_identity=_identity({"/lib/libtorch_cpu.so": A, "/lib/libz.so.1": A}, {}, {})))
    _edit(b, "backends.json", lambda d: d["backends"]["one"].update(
        runtime_identity={**_identity({"/lib/libz.so.1": A}, {}, {}), "pending": pending}))
    texts = [d["text"] for d in compare_runs(a, b).to_json()["pairs"][0]["environment"]["differences"]]
    assert ("libraries: only the baseline mapped /lib/libtorch_cpu.so" in texts) is (pending == 0)


@pytest.mark.parametrize(("loads", "shown"), [((5.3, 3.0), True), ((3.0, 3.2), False), ((0.1, 0.4), False)])
def test_load_averages_that_differ_are_an_environment_difference(two_runs, tmp_path, loads, shown):
    a, b = _copies(two_runs, tmp_path)
    for run, load in zip((a, b), loads, strict=True):
        _edit(run, "environment.json", lambda d, load=load: d["cpu"].update(load_average_1_5_15=[load, 1.0, 1.0],
                                                                            cores_usable=2))
    texts = [d["text"] for d in compare_runs(a, b).to_json()["pairs"][0]["environment"]["differences"]]
    line = f"load_average (1 minute, at the start): {loads[0]:g} vs {loads[1]:g} on 2 vs 2 cores"
    assert (line in texts) is shown


def test_a_run_recording_no_identity_says_not_recorded_and_never_crashes_on_odd_shapes(two_runs, tmp_path):
    a, b = _copies(two_runs, tmp_path)
    assert {"libraries", "kernel_caches", "autotune"} <= set(compare_runs(a, b).to_json()["pairs"][0]["environment"]["not_recorded"])
    _edit(a, "backends.json", lambda d: d["backends"]["one"].update(runtime_identity={"libraries": "many"},
                                                                    torch_threads=1e308, dtype=["x"]))
    _edit(b, "environment.json", lambda d: d.update(cpu=[1, 2], gpus={"devices": [None]}, container_images=7))
    with pytest.raises(EvidenceError, match=r"backends\.json.*runtime_identity\.libraries"):  # one error line, no crash
        compare_runs(a, b)


def test_the_image_each_backend_ran_in_is_compared(two_runs, tmp_path):
    a, b = _copies(two_runs, tmp_path)
    for run, digest in ((a, A), (b, B)):
        _edit(run, "environment.json", lambda d, digest=digest: d.update(container_images={"one": {
            "reference": "openjev-repro/reference-cpu:offline", "id": f"sha256:{digest}", "repo_digests": []}}))
    texts = [d["text"] for d in compare_runs(a, b).to_json()["pairs"][0]["environment"]["differences"]]
    assert f"container_image: sha256:{A} vs sha256:{B}" in texts

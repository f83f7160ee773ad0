"""The recipe's environment declarations, the backend's --kernels flag and what it reports, and the
comparison of declared with reported environments (pure functions; the end-to-end check on the
demo is tests/test_environment_drift.py)."""

import subprocess
import sys
import types

import msgspec
import pytest
from studykit import scripted_backend, write_study

from openjev_repro.backend.kernel_choice import KernelNames, autotune_choices
from openjev_repro.backend.kernels import BoundKernels
from openjev_repro.errors import RecipeError, ReproError
from openjev_repro.evidence.recipe import EnvironmentSpec, load_recipe
from openjev_repro.evidence.records import EnvironmentRecord
from openjev_repro.hashing import source_digest, tree_digest
from openjev_repro.host.driver import reason_names
from openjev_repro.host.smi import parse_state
from openjev_repro.orchestrator.environment_check import differences, observed

REFERENCE = BoundKernels(linear_attention_layers=3, full_attention_layers=1, full_attention="sdpa",
                         chunk_gated_delta_rule=["torch_chunk_gated_delta_rule"], causal_conv1d_fn=["torch (F.conv1d)"],
                         norm=["Qwen3_5RMSNormGated"])
FLA = msgspec.structs.replace(REFERENCE, chunk_gated_delta_rule=["fla.ops.gated_delta_rule.chunk.chunk_gated_delta_rule"])


def test_kernel_names_name_reference_and_fla_as_a_recipe_declares_them():
    assert KernelNames.of("auto", REFERENCE).to_json() == {
        "requested": "auto", "linear_attention": "reference", "conv": "reference", "norm": "reference",
        "full_attention": "sdpa"}
    assert KernelNames.of("auto", FLA).linear_attention == "fla"
    KernelNames.of("fla", FLA).checked()
    KernelNames.of("reference", REFERENCE).checked()
    with pytest.raises(ReproError, match="--kernels fla: the linear-attention layers are bound to reference"):
        KernelNames.of("fla", REFERENCE).checked()
    with pytest.raises(ReproError, match="--kernels reference"):
        KernelNames.of("reference", FLA).checked()


def test_autotune_choices_reads_each_autotuners_cache_of_loaded_fla_modules(monkeypatch):
    class Autotuner:  # the shape of triton.runtime.autotuner.Autotuner: configs, and cache key -> Config
        def __init__(self, cache):
            self.configs = ["BV: 32, num_warps: 4", "BV: 64, num_warps: 8"]
            self.cache = cache

    module = types.ModuleType("fla.ops.fake_chunk")
    module.kernel = Autotuner({(64, "torch.bfloat16"): "BV: 64, num_warps: 8"})
    module.untuned = Autotuner({})
    monkeypatch.setitem(sys.modules, "fla.ops.fake_chunk", module)
    assert autotune_choices() == {"fla.ops.fake_chunk.kernel": {"(64, 'torch.bfloat16')": "BV: 64, num_warps: 8"}}


def _health(**changes):
    return {"packages": {"torch": "2.13.0+cpu", "transformers": "5.10.2", "flash-linear-attention": None},
            "kernels": KernelNames.of("auto", REFERENCE).to_json(), "dtype": "float32", "weights_fingerprint": "wfp1:aa",
            "source_sha256": "s" * 64, **changes}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"packages": {"torch": "2.13.0"}}, []),  # a local version label (+cpu) matches the exact pin
    ({"packages": {"torch": ">=2.12,<3", "transformers": "~=5.10.0"}}, []),
    ({"packages": {"torch": "2.11.0"}}, ["package torch: recipe 2.11.0, backend has 2.13.0+cpu"]),
    ({"packages": {"flash-linear-attention": "0.6.0"}}, ["package flash-linear-attention: recipe 0.6.0, not installed"]),
    ({"packages": {"flash_linear_attention": "absent"}}, []),
    ({"packages": {"torch": "absent"}}, ["package torch: recipe absent, backend has 2.13.0+cpu"]),
    ({"implementations": {"linear_attention": "fla"}},
     ["implementations.linear_attention: recipe fla, backend reports reference"]),
    ({"dtype": "bfloat16", "weights_fingerprint": "wfp1:bb"},
     ["dtype: recipe bfloat16, backend reports float32", "weights_fingerprint: recipe wfp1:bb, backend reports wfp1:aa"]),
])
def test_declared_and_reported_environments_differ_by_named_phrases(spec, expected):
    assert differences(EnvironmentSpec(**spec), observed(_health(), None, "b")) == expected


def test_a_backend_that_reports_nothing_fails_every_declaration_and_another_source_digest_is_named():
    spec = EnvironmentSpec(packages={"torch": "2.13.0"}, implementations={"linear_attention": "reference"})
    assert differences(spec, observed({}, None, "b")) == [
        "package torch: recipe 2.13.0, the backend reports no package versions",
        "implementations.linear_attention: recipe reference, backend reports nothing"]
    env = EnvironmentRecord.from_json({"format_version": 2, "backends": {"b": {  # the probe of its interpreter
        "available": True, "packages": {"torch": "2.13.0"}}}})
    assert differences(EnvironmentSpec(packages={"torch": "2.13.0"}), observed({}, env, "b")) == []
    found = differences(EnvironmentSpec(), observed(_health(), None, "b"), source_sha256="t" * 64)
    assert found == ["source_sha256: the study runs tttttttttttt, the backend runs ssssssssssss (different project code)"]


def test_backend_declarations_replace_the_study_defaults_key_by_key(tmp_path):
    path = write_study(tmp_path, [{**scripted_backend("one"), "environment": {
        "packages": {"torch": "2.11.0"}, "implementations": {"linear_attention": "fla"}}}, scripted_backend("two")],
        extra={"environment": {"packages": {"torch": "2.13.0", "peft": "0.19.1"}, "dtype": "bfloat16"}})
    recipe = load_recipe(path)
    one, two = (recipe.environment_of(b) for b in recipe.backends)
    assert one.packages == {"torch": "2.11.0", "peft": "0.19.1"} and one.implementations == {"linear_attention": "fla"}
    assert one.dtype == "bfloat16" and two.packages == {"torch": "2.13.0", "peft": "0.19.1"}


@pytest.mark.parametrize("bad", [{"packages": {"torch": 2.13}}, {"packages": {"torch": "2.13\nx"}},
                                 {"implementations": {"Linear": "fla"}}, {"kernels": "fla"},
                                 {"triton_cache": {"dir": "../elsewhere", "sha256": "0" * 64}}])
def test_bad_environment_declarations_are_one_recipe_error_with_the_line(tmp_path, bad):
    path = write_study(tmp_path, [scripted_backend("one")], extra={"environment": bad})
    with pytest.raises(RecipeError, match=r"recipe.yaml:\d+: environment"):
        load_recipe(path)


def test_source_digest_is_recomputable_with_sha256sum_and_changes_with_any_source_file(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not source\n")
    first = source_digest(tmp_path / "pkg")
    listing = subprocess.run("find . -name '*.py' | sed 's|^./||' | LC_ALL=C sort | xargs sha256sum | sha256sum",
                             shell=True, cwd=tmp_path / "pkg", capture_output=True, text=True, check=True)
    assert first["sha256"] == listing.stdout.split()[0] and first["files"] == 2
    (tmp_path / "pkg" / "sub" / "b.py").write_text("y = 3\n")
    assert source_digest(tmp_path / "pkg")["sha256"] != first["sha256"]
    (tmp_path / "pkg" / "link.py").symlink_to(tmp_path / "pkg" / "a.py")
    assert tree_digest(tmp_path / "pkg", (".py",))["skipped"] == 1


def test_nvidia_smi_state_line_and_clock_event_reason_names():
    state = parse_state("1980, 3201, 0x0000000000000004, 41, 595.21\n")
    assert state == {"sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "clock_event_reasons": 4, "temperature_c": 41,
                     "power_w": 595.21, "energy_mj": None}
    assert parse_state("345, 3201, [N/A], 30, [N/A]\n")["power_w"] is None
    assert reason_names(0x4 | 0x40 | 0x1000) == ["sw_power_cap", "hw_thermal_slowdown", "0x1000"]


def _backend(*args, fixture_checkpoint):
    return subprocess.run([sys.executable, "-m", "openjev_repro.backend", "--checkpoint", str(fixture_checkpoint),
                           "--device", "cpu", "--port", "0", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_backend_refuses_kernels_fla_without_fla_in_one_line_before_binding(fixture_checkpoint):
    done = _backend("--mode", "fast", "--kernels", "fla", fixture_checkpoint=fixture_checkpoint)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line, nothing bound or loaded
    assert done.stderr.startswith("error: --kernels fla: FLA (flash-linear-attention) is not importable")
    raw = _backend("--mode", "raw", "--kernels", "fla", fixture_checkpoint=fixture_checkpoint)
    assert raw.returncode == 2 and raw.stderr.startswith("error: --kernels fla: raw mode always runs")


def _cache_study(tmp_path, digest):
    cache = tmp_path / "inputs" / "triton-cache" / "abc123"
    cache.mkdir(parents=True)
    (cache / "chunk_kernel.autotune.json").write_text('{"configs_timings": [], "BV": 64}\n')
    seen = tmp_path / "seen"
    wrapper = ('cp -r "$TRITON_CACHE_DIR" "$SEEN" && echo "$FLA_CACHE_RESULTS" > "$SEEN/flag" '
               '&& touch "$TRITON_CACHE_DIR/new-entry" && exec "$0" "$@"')
    backend = {**scripted_backend("one"), "env": {"SEEN": str(seen), "SCRIPTED_FAULT": "none", "SCRIPTED_AFTER": "0"}}
    backend["command"] = ["sh", "-c", wrapper, *backend["command"]]
    backend["environment"] = {"triton_cache": {"dir": "triton-cache", "sha256": digest(tmp_path / "inputs" / "triton-cache")}}
    return write_study(tmp_path, [backend], n=2), seen, cache


def test_a_pinned_triton_cache_is_checked_copied_for_the_backend_and_its_changes_recorded(tmp_path):
    import json

    from openjev_repro.orchestrator.runner import StudyOptions, run_study

    recipe, seen, cache = _cache_study(tmp_path, lambda d: tree_digest(d)["sha256"])
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    assert (seen / "abc123" / "chunk_kernel.autotune.json").is_file()  # the backend's TRITON_CACHE_DIR held the pin
    assert (seen / "flag").read_text().strip() == "1"  # FLA_CACHE_RESULTS=1
    assert not (cache.parent / "new-entry").exists()  # the declared input is never written
    record = json.loads(run.file("environment_check.json").read_text())["triton_cache"]["one"]
    assert record["unchanged"] is False and record["after_sha256"] != record["sha256"]


def test_a_triton_cache_with_another_digest_stops_the_study_before_the_backend_starts(tmp_path):
    from openjev_repro.errors import RunIncomplete
    from openjev_repro.orchestrator.runner import StudyOptions, run_study

    recipe, seen, _ = _cache_study(tmp_path, lambda d: "0" * 64)
    with pytest.raises(RunIncomplete, match=r"the Triton cache triton-cache has tree digest [0-9a-f]{64}, the recipe "
                                            "declares 0{64}; it is not the pinned cache"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    assert not seen.exists()


def test_nvml_gpu_state_reads_clocks_reasons_temperature_power_and_the_energy_counter(monkeypatch):
    """nvidia-ml-py's real module with its calls answered here (no driver on this machine)."""
    import pynvml

    from openjev_repro.host.nvml import NvmlDriver

    answers = {"nvmlDeviceGetClockInfo": lambda h, clock: {pynvml.NVML_CLOCK_SM: 1860, pynvml.NVML_CLOCK_MEM: 3201}[clock],
               "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x4,
               "nvmlDeviceGetTemperature": lambda h, sensor: 52,
               "nvmlDeviceGetPowerUsage": lambda h: 595_250,  # mW
               "nvmlDeviceGetTotalEnergyConsumption": lambda h: 9_876_543,  # mJ
               "nvmlDeviceGetHandleByUUID": lambda uuid: "handle", "nvmlInit": lambda: None,
               "nvmlShutdown": lambda: None}
    for name, answer in answers.items():
        monkeypatch.setattr(pynvml, name, answer)
    driver = NvmlDriver()
    assert driver.gpu_state("GPU-x") == {"sm_clock_mhz": 1860, "mem_clock_mhz": 3201, "clock_event_reasons": 4,
                                         "temperature_c": 52, "power_w": 595.25, "energy_mj": 9_876_543}

    def unsupported(h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", unsupported)
    assert driver.gpu_state("GPU-x")["energy_mj"] is None  # an older GPU: the sampled power is integrated
    driver.close()

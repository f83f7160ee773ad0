"""Environment capture: real collectors on this host, absent things recorded as absent."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.manifest.environment import (
    PACKAGES,
    collect_environment,
    collect_git,
    collect_gpus,
    collect_host,
    collect_python,
    gpus_from_nvidia_smi,
)

# Stands in for the NVIDIA driver's nvidia-smi (no GPU here): answers the two queries we make.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "2, NVIDIA L20X, GPU-cbf66259-f4ab-0ede-1811-82037dde5924, 580.65.06, 143771, 0, 345, 2619, 1980, Enabled, [N/A]" ;;
  *) echo "| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06    CUDA Version: 13.0     |" ;;
esac
"""


def test_failing_collector_is_recorded_as_absent_not_raised():
    def broken():
        raise RuntimeError("no such thing")

    ok = {"available": True, "commit": "0" * 40, "dirty": False}
    env = collect_environment(collectors={"project_git": lambda: ok, "host": broken}).to_json()
    assert env == {"format_version": 2, "project_git": ok,
                   "host": {"available": False, "reason": "RuntimeError: no such thing"}}


def test_default_capture_on_this_host(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("format_version: 1\n")
    env = collect_environment(backends_python={"hf": sys.executable}, recipe_path=recipe).to_json()
    json.dumps(env, allow_nan=False)  # strict JSON
    assert env["recipe_sha256"] == hashlib.sha256(recipe.read_bytes()).hexdigest()
    assert env["host"]["cpu_count"] == os.cpu_count() and env["host"]["memory_total_bytes"] > 0
    assert env["container_images"] == {"available": False, "reason": "no container images given"}
    hf = env["backends"]["hf"]
    assert hf["available"] and set(hf["packages"]) == set(PACKAGES)
    assert hf["packages"]["transformers"] == "5.10.2"
    assert hf["packages"]["causal-conv1d"] == {"available": False, "reason": "not installed"}
    if not Path("/dev/nvidiactl").exists():  # this CI host has no NVIDIA driver
        assert env["gpus"]["available"] is False and "gpus_from_nvml" in env["gpus"]["reason"]


def test_python_of_a_missing_environment_is_absent(tmp_path):
    info = collect_python(str(tmp_path / "no-python"))
    assert info["available"] is False and "could not run" in info["reason"]


def test_nvidia_smi_fallback_parses_and_marks_unknowns(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    (gpu,) = gpus_from_nvidia_smi()
    assert gpu["index"] == 2 and gpu["uuid"] == "GPU-cbf66259-f4ab-0ede-1811-82037dde5924"
    assert gpu["memory_total_mib"] == 143771 and gpu["cuda_driver_version"] == "13.0"
    assert gpu["persistence_mode"] is True and gpu["ecc_enabled"]["available"] is False
    assert gpu["sm_count"]["available"] is False

    def no_nvml():
        raise OSError("NVML Shared Library Not Found")

    result = collect_gpus(sources=(no_nvml, gpus_from_nvidia_smi))
    assert result["available"] and result["source"] == "gpus_from_nvidia_smi"


@pytest.mark.slow  # platform.processor() runs `uname -p`
def test_host():
    host = collect_host()
    assert host["available"] and host["kernel"] == platform.release() and host["cpu_count"] == os.cpu_count()
    assert host["cpu_affinity"] == sorted(os.sched_getaffinity(0))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True, timeout=30).stdout.strip()


def test_git_commit_and_dirty_state_of_a_real_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git never looks above tmp_path
    assert shutil.which("git"), "git is needed to test the git collector (apt-get install git)"
    repo = tmp_path / "repo"
    _git(tmp_path, "init", "-q", str(repo))
    (repo / "recipe.yaml").write_text("format_version: 1\n")
    _git(repo, "add", "recipe.yaml")
    _git(repo, "commit", "-q", "-m", "first")
    assert collect_git(repo) == {"available": True, "commit": _git(repo, "rev-parse", "HEAD"), "dirty": False}
    (repo / "recipe.yaml").write_text("format_version: 2\n")
    assert collect_git(repo)["dirty"] is True
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    absent = collect_git(outside)
    assert absent["available"] is False and "not a git checkout" in absent["reason"]


def test_cpu_frequency_policy_is_summarised_over_every_cpu(tmp_path):
    from openjev_repro.manifest.environment import collect_cpu

    for cpu, (governor, cur) in enumerate([("performance", 3500000), ("performance", 3400000), ("powersave", 1200000)]):
        policy = tmp_path / f"cpu{cpu}" / "cpufreq"
        policy.mkdir(parents=True)
        for name, value in {"scaling_governor": governor, "scaling_driver": "intel_pstate",
                            "scaling_cur_freq": cur, "scaling_min_freq": 800000, "scaling_max_freq": 3800000}.items():
            (policy / name).write_text(f"{value}\n")
    cpu = collect_cpu(tmp_path)
    freq = cpu["cpufreq"]
    assert freq["cpus"] == 3 and freq["scaling_governor"] == {"performance": 2, "powersave": 1}
    assert freq["scaling_driver"] == {"intel_pstate": 3} and freq["scaling_max_freq"] == {"3800000": 3}
    assert freq["scaling_cur_freq_khz"] == {"min": 1200000, "max": 3500000, "mean": 2700000}
    assert freq["energy_performance_preference"] == {} and freq["boost"]["available"] is False
    assert len(cpu["load_average_1_5_15"]) == 3 and "OMP_NUM_THREADS" in cpu["thread_env"]


def test_cpu_without_cpufreq_says_so(tmp_path):
    from openjev_repro.manifest.environment import collect_cpu

    cpu = collect_cpu(tmp_path)
    assert cpu["cpufreq"]["available"] is False and "cpufreq" in cpu["cpufreq"]["reason"]
    assert cpu["cores_online"] >= 1

"""Environment capture: small collectors, each returning what it saw or why it saw nothing.

`collect_environment()` runs every collector; tests pass their own `collectors`. Absent
things are recorded as `{"available": false, "reason": ...}`, never guessed. A collector
that raises is recorded the same way, so capture never stops a study.

Format history (`format_version` of environment.json):
    1  (2026-11) first version.
    2  (2026-12) adds `cpu` (model, cores, frequency policy per cpufreq, load average, thread
       variables); version 1 files simply lack it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from ..evidence.records import EnvironmentRecord
from ..hashing import hash_file, source_digest

__all__ = [
    "ENVIRONMENT_FORMAT_VERSION",
    "PACKAGES",
    "Collector",
    "absent",
    "collect_cpu",
    "collect_environment",
    "collect_git",
    "collect_gpus",
    "collect_host",
    "collect_python",
    "default_collectors",
    "gpus_from_nvidia_smi",
    "gpus_from_nvml",
]

ENVIRONMENT_FORMAT_VERSION = 2
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS",
              "OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY")
CPUFREQ_ROOT = Path("/sys/devices/system/cpu")
PACKAGES = ("torch", "transformers", "peft", "accelerate", "tokenizers",
            "flash-linear-attention", "triton", "causal-conv1d")
PROJECT_ROOT = Path(__file__).resolve().parents[2]

Collector = Callable[[], Any]


def absent(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


# --- host --------------------------------------------------------------------------------


def _cpu_model() -> str | None:
    """The first "model name" of /proc/cpuinfo; None when it names none."""
    cpuinfo = _read("/proc/cpuinfo") or ""
    return next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                 if line.startswith("model name")), None)


def _memory_total_bytes() -> int | None:
    meminfo = _read("/proc/meminfo") or ""
    mem_kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), None)
    return mem_kib * 1024 if mem_kib is not None else None


def _affinity() -> list[int] | None:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _or_absent(value: Any, reason: str) -> Any:
    """`value`, or the record of its absence when it is empty or None."""
    return value if value else absent(reason)


def collect_host() -> dict[str, Any]:
    model = _cpu_model()
    mem_bytes = _memory_total_bytes()
    affinity = _affinity()
    nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    return {
        "available": True,
        "hostname": platform.node(),
        "cpu_model": _or_absent(model, "/proc/cpuinfo names no model"),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity if affinity is not None else absent("no sched_getaffinity"),
        "numa_nodes": [int(n[4:]) for n in nodes] if nodes else absent("no /sys/devices/system/node"),
        "kernel": platform.release(),
        "os": platform.platform(),
        "memory_total_bytes": mem_bytes if mem_bytes is not None else absent("no MemTotal in /proc/meminfo"),
    }


_CPUFREQ_FILES = ("scaling_driver", "scaling_governor", "energy_performance_preference",
                  "scaling_min_freq", "scaling_max_freq", "cpuinfo_max_freq")


def _policy_values(policies: list[Path], name: str) -> dict[str, int]:
    """{content of `name`: number of CPU policies holding it} over the policies where it is readable."""
    seen: dict[str, int] = {}
    for policy in policies:
        text = _read(str(policy / name))
        if text is not None:
            seen[text.strip()] = seen.get(text.strip(), 0) + 1
    return dict(sorted(seen.items()))


def _cur_freq(policies: list[Path]) -> Any:
    cur = [int(v) for v in (_read(str(p / "scaling_cur_freq")) for p in policies) if v and v.strip().isdigit()]
    if not cur:
        return absent("no readable scaling_cur_freq")
    return {"min": min(cur), "max": max(cur), "mean": round(sum(cur) / len(cur))}


def _cpufreq(root: Path) -> Any:
    policies = sorted(root.glob("cpu[0-9]*/cpufreq"))
    if not policies:
        return absent(f"no {root}/cpu*/cpufreq (no cpufreq driver, or a container/VM hides it)")
    return {"cpus": len(policies),
            **{name: _policy_values(policies, name) for name in _CPUFREQ_FILES},
            "scaling_cur_freq_khz": _cur_freq(policies),
            "boost": _or_absent((_read(str(root / "cpufreq" / "boost")) or "").strip(), "no cpufreq/boost")}


def collect_cpu(root: Path = CPUFREQ_ROOT) -> dict[str, Any]:
    """What decides a CPU-bound (kernel-launch-bound) backend's speed: model, cores, frequency policy, load.

    Frequency settings come from `cpu*/cpufreq/` (scaling_driver, scaling_governor,
    energy_performance_preference, scaling_cur/min/max_freq in kHz), summarised over every CPU
    as {value: number of CPUs} so a host with mixed settings shows it; absent in most containers
    and VMs, which is then recorded as such.
    """
    model = _cpu_model()
    cpufreq = _cpufreq(root)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    affinity = _affinity()
    return {
        "available": True,
        "model": _or_absent(model, "/proc/cpuinfo names no model"),
        "cores_online": os.cpu_count(),
        "cores_usable": len(affinity) if affinity is not None else absent("no affinity"),
        "cpufreq": cpufreq,
        "load_average_1_5_15": [round(v, 2) for v in load] if load else absent("no os.getloadavg"),
        "thread_env": {name: os.environ.get(name) for name in THREAD_ENV},
    }


# --- GPUs ----------------------------------------------------------------------------------


def gpus_from_nvml() -> list[dict[str, Any]]:
    """Every GPU through NVML; raises when no driver answers."""
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = _nvml_memory(pynvml, handle)
            reserved = getattr(memory, "reserved", None)
            gpus.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "driver_version": driver,
                "cuda_driver_version": f"{cuda // 1000}.{(cuda % 1000) // 10}",
                "memory_total_mib": memory.total // (1 << 20),
                "memory_used_mib": memory.used // (1 << 20),
                # v2 separates driver-reserved memory, which v1 counts as used (nvidia-smi does not)
                "memory_reserved_mib": reserved // (1 << 20)
                if reserved is not None else absent("NVML memory info v1 has no reserved"),
                **_nvml_optional_fields(pynvml, handle),
                "source": "nvml",
            })
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _nvml_memory(pynvml: Any, handle: Any) -> Any:
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    except (pynvml.NVMLError, TypeError, AttributeError):  # older drivers or bindings: v1 only
        return pynvml.nvmlDeviceGetMemoryInfo(handle)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_optional_fields(pynvml: Any, handle: Any) -> dict[str, Any]:
    """What some drivers, GPUs or bindings do not report; each unreadable one is absent, with NVML's reason."""

    def optional(read: Callable[[], Any]) -> Any:
        try:
            return read()
        # NVML raises one NVMLError subclass per code, and older bindings lack some calls:
        # any of them means "not readable"
        except (pynvml.NVMLError, AttributeError) as exc:
            return absent(f"NVML: {exc}")

    return {
        "cuda_cores": optional(lambda: pynvml.nvmlDeviceGetNumGpuCores(handle)),
        "sm_count": absent("NVML does not report the SM count"),
        "compute_capability": optional(
            lambda: ".".join(str(v) for v in pynvml.nvmlDeviceGetCudaComputeCapability(handle))),
        "clocks_mhz": {
            "sm": optional(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "memory": optional(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
            "sm_max": optional(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        },
        "persistence_mode": optional(lambda: bool(pynvml.nvmlDeviceGetPersistenceMode(handle))),
        "ecc_enabled": optional(lambda: bool(pynvml.nvmlDeviceGetCurrentEccMode(handle))),
    }


_SMI_FIELDS = ("index", "name", "uuid", "driver_version", "memory.total", "memory.used",
               "clocks.sm", "clocks.mem", "clocks.max.sm", "persistence_mode", "ecc.mode.current")


def gpus_from_nvidia_smi(executable: str = "nvidia-smi") -> list[dict[str, Any]]:
    """Every GPU through `nvidia-smi --query-gpu`; raises when it is missing or fails."""
    if shutil.which(executable) is None:
        raise FileNotFoundError(f"{executable} is not on PATH")
    out = subprocess.run(
        [executable, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    header = subprocess.run([executable], capture_output=True, text=True, timeout=30, check=False).stdout
    cuda = next((part.split(":", 1)[1].split("|")[0].strip() for part in header.split("CUDA Version")[1:2]), None)
    return [_SmiGpu.of(line).as_json(cuda) for line in out.strip().splitlines()]


class _SmiGpu(NamedTuple):
    """One line of `nvidia-smi --query-gpu=<_SMI_FIELDS>`, in that order."""

    gpu_index: str
    name: str
    uuid: str
    driver_version: str
    memory_total: str
    memory_used: str
    clocks_sm: str
    clocks_mem: str
    clocks_max_sm: str
    persistence_mode: str
    ecc_mode: str

    @classmethod
    def of(cls, line: str) -> _SmiGpu:
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(_SMI_FIELDS):
            raise ValueError(f"nvidia-smi printed {len(values)} fields, not {len(_SMI_FIELDS)}: {line[:200]!r}")
        return cls(*values)

    def as_json(self, cuda: str | None) -> dict[str, Any]:
        return {
            "index": int(self.gpu_index),
            "name": self.name,
            "uuid": self.uuid,
            "driver_version": self.driver_version,
            "cuda_driver_version": cuda or absent("nvidia-smi printed no CUDA Version"),
            "memory_total_mib": _smi_number(self.memory_total),
            "memory_used_mib": _smi_number(self.memory_used),
            "sm_count": absent("nvidia-smi does not report SM count"),
            "clocks_mhz": {"sm": _smi_number(self.clocks_sm), "memory": _smi_number(self.clocks_mem),
                           "sm_max": _smi_number(self.clocks_max_sm)},
            "persistence_mode": _smi_flag(self.persistence_mode),
            "ecc_enabled": _smi_flag(self.ecc_mode),
            "source": "nvidia-smi",
        }


def _smi_number(text: str | None) -> Any:
    try:
        if text is not None:
            return int(float(text))
    except (ValueError, OverflowError):  # not a number, or inf
        pass
    return absent(f"nvidia-smi reported {text!r}")


def _smi_flag(text: str | None) -> Any:
    if text in ("Enabled", "Disabled"):
        return text == "Enabled"
    return absent(f"nvidia-smi reported {text!r}")


def collect_gpus(sources: tuple[Callable[[], list[dict]], ...] | None = None) -> dict[str, Any]:
    """GPUs from the first source that answers: NVML, the host inventory, then nvidia-smi.

    Our NVML reader comes first because it records clocks, persistence and ECC, which the
    host inventory (openjev_repro.host, made for reservations) does not.
    """
    if sources is None:
        sources = (gpus_from_nvml, _host_inventory, gpus_from_nvidia_smi)
    reasons = []
    for source in sources:
        try:
            return {"available": True, "devices": source(), "source": source.__name__}
        except Exception as exc:  # noqa: BLE001 - each source fails its own way; all of them mean "not here"
            reasons.append(f"{source.__name__}: {type(exc).__name__}: {exc}")
    return absent("no GPU source answered (" + "; ".join(reasons) + ")")


def _host_inventory() -> list[dict[str, Any]]:
    from ..host import detect_driver  # raises NoDriver (a HostError) without a driver

    driver = detect_driver()
    try:
        version = driver.driver_version()
        return [{**gpu.to_dict(), "driver_version": version, "source": driver.name} for gpu in driver.gpus()]
    finally:
        driver.close()


# --- Python environments of the backends --------------------------------------------------

_PROBE = (
    "import importlib.metadata as m, json, platform, sys\n"
    "out = {'python': platform.python_version(), 'executable': sys.executable, 'packages': {}}\n"
    "for name in json.loads(sys.argv[1]):\n"
    "    try:\n"
    "        out['packages'][name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        out['packages'][name] = None\n"
    "print(json.dumps(out))\n"
)


def collect_python(python: str, packages: tuple[str, ...] = PACKAGES) -> dict[str, Any]:
    """Python and package versions of one environment, asked of its own interpreter."""
    try:
        result = subprocess.run([python, "-c", _PROBE, json.dumps(list(packages))],
                                capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return absent(f"could not run {python}: {exc}")
    if result.returncode != 0:
        return absent(f"{python} exited {result.returncode}: {result.stderr.strip()[-300:]}")
    try:
        probe = msgspec.json.decode(result.stdout, type=_Probe)
    except msgspec.DecodeError as exc:
        return absent(f"{python} printed no package versions ({exc})")
    return {"available": True, "python": probe.python, "executable": probe.executable,
            "packages": {k: (v if v is not None else absent("not installed")) for k, v in probe.packages.items()}}


class _Probe(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What `_PROBE` prints."""

    python: str
    executable: str
    packages: dict[str, str | None]


# --- this project -------------------------------------------------------------------------


def collect_git(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()

    try:
        return {"available": True, "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError) as exc:
        return absent(f"not a git checkout or git is missing ({exc})")


def default_collectors(*, backends_python: dict[str, str] | None = None,
                       images: dict[str, dict] | None = None,
                       recipe_path: Path | None = None) -> dict[str, Collector]:
    collectors: dict[str, Collector] = {
        "host": collect_host,
        "cpu": collect_cpu,
        "gpus": collect_gpus,
        "orchestrator_python": lambda: collect_python(sys.executable),
        "backends": lambda: {name: collect_python(py) for name, py in sorted((backends_python or {}).items())}
        or absent("no backend environments given"),
        "container_images": lambda: dict(images) if images else absent("no container images given"),
        "project_git": collect_git,
        "project_source": source_digest,  # the package's .py files as they run (true in a copied tree)
    }
    if recipe_path is not None:
        collectors["recipe_sha256"] = lambda: hash_file(recipe_path)
    else:
        collectors["recipe_sha256"] = lambda: absent("no recipe given")
    return collectors


def collect_environment(*, backends_python: dict[str, str] | None = None,
                        collectors: dict[str, Collector] | None = None,
                        images: dict[str, dict] | None = None,
                        recipe_path: Path | None = None) -> EnvironmentRecord:
    """Run every collector; a failing collector is recorded as absent with its reason."""
    if collectors is None:
        collectors = default_collectors(backends_python=backends_python, images=images, recipe_path=recipe_path)
    parts: dict[str, Any] = {}
    for name, collector in collectors.items():
        try:
            parts[name] = collector()
        except Exception as exc:  # noqa: BLE001 - capture never stops a study; it says what it could not see
            parts[name] = absent(f"{type(exc).__name__}: {exc}")
    return EnvironmentRecord.from_parts(ENVIRONMENT_FORMAT_VERSION, parts)

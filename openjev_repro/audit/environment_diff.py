"""compare's "Environment differences": what differed between the two runs of each backend pair,
from each run's environment.json, backends.json, host.json and environment_check.json (any of
which an older run may lack: then that item is "not recorded", never a difference).

Items: packages, kernel implementations, weights fingerprint, project commit + dirty flag +
source digest, GPU model and driver, torch threads, CPU model, container image; plus the drift
a run recorded when measured with --allow-environment-drift. When decisions or probabilities
differ, `explanations` names the recorded differences that can explain it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import EvidenceError
from ..evidence.rundir import RunDir

__all__ = ["RunEnvironment", "environment_differences", "explanations", "project_note"]

# Differences that can change probabilities (kernels, numerics, weights, code); the others
# (CPU model, threads, GPU driver) mostly move latency.
NUMERIC_ITEMS = ("implementations", "packages", "dtype", "weights_fingerprint", "project_source", "gpu", "drift")


def _read(run: RunDir, name: str) -> dict:
    if not run.file(name).is_file():
        return {}
    try:
        data = run.read(name)
    except (EvidenceError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _version(value: Any) -> str | None:
    return value if isinstance(value, str) else ("not installed" if isinstance(value, dict) else None)


class RunEnvironment:
    """One run's recorded environment, read once."""

    def __init__(self, directory: Path) -> None:
        run = RunDir(Path(directory))
        self.env, self.backends = _read(run, "environment.json"), _read(run, "backends.json").get("backends") or {}
        self.host, self.check = _read(run, "host.json"), _read(run, "environment_check.json")

    def project(self) -> dict[str, Any]:
        git = self.env.get("project_git") or {}
        return {"commit": git.get("commit"), "dirty": git.get("dirty"),
                "source_sha256": _get(self.env, "project_source", "sha256")}

    def gpu(self) -> str | None:
        devices = _get(self.env, "gpus", "devices")
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            d = devices[0]
            return f"{d.get('name')} driver {d.get('driver_version')}"
        device = self.host.get("device")
        if isinstance(device, dict):
            return f"{device.get('name')} driver {_get(device, 'driver', 'version')}"
        return None

    def items(self, backend: str) -> dict[str, Any]:
        """item -> recorded value (None: not recorded) for one backend of this run."""
        b = self.backends.get(backend) if isinstance(self.backends.get(backend), dict) else {}
        packages = b.get("packages") if isinstance(b.get("packages"), dict) else _get(
            self.env, "backends", backend, "packages")
        image = _get(self.env, "container_images", backend)
        return {
            "packages": {k: _version(v) for k, v in packages.items()} if isinstance(packages, dict) else None,
            "implementations": b.get("kernels") if isinstance(b.get("kernels"), dict) else (
                b.get("implementations") if isinstance(b.get("implementations"), dict) else None),
            "dtype": b.get("dtype") if isinstance(b.get("dtype"), str) else None,
            "weights_fingerprint": b.get("weights_fingerprint") if isinstance(b.get("weights_fingerprint"), str) else None,
            "project_commit": _project_text(self.project()),
            "project_source": self.project()["source_sha256"],
            "gpu": self.gpu(),
            "torch_threads": None if b.get("torch_threads") is None or isinstance(b.get("torch_threads"), dict)
            else f"{b.get('torch_threads')}/{b.get('torch_interop_threads')}",
            "cpu_model": _get(self.env, "cpu", "model") or _get(self.env, "host", "cpu_model"),
            "container_image": (_get(image, "id") or json.dumps(image, sort_keys=True)[:80])
            if isinstance(image, dict) else None,
        }

    def drift(self, backend: str) -> list[str]:
        found = _get(self.check, "backends", backend, "differences")
        return [str(d) for d in found] if isinstance(found, list) else []


def _project_text(project: dict[str, Any]) -> str | None:
    if not project.get("commit"):
        return None
    return f"{str(project['commit'])[:12]}{' (dirty)' if project.get('dirty') else ''}"


def _dict_differences(item: str, a: dict | None, b: dict | None) -> list[str]:
    if a is None or b is None:
        return []
    keys = sorted(set(a) | set(b))
    return [f"{item}.{k}: {a.get(k, 'not recorded')} vs {b.get(k, 'not recorded')}" for k in keys
            if a.get(k) != b.get(k) and k in a and k in b] + [
        f"{item}.{k}: {a.get(k, 'not recorded')} vs {b.get(k, 'not recorded')}" for k in keys
        if (k in a) != (k in b) and (a.get(k) or b.get(k))]


def environment_differences(base: RunEnvironment, cand: RunEnvironment, base_name: str,
                            cand_name: str) -> dict[str, Any]:
    """Per item: the difference (baseline vs candidate), and which items neither run recorded."""
    ia, ib = base.items(base_name), cand.items(cand_name)
    differences: list[dict[str, str]] = []
    unrecorded = []
    for item in ia:
        a, b = ia[item], ib[item]
        if a is None and b is None:
            unrecorded.append(item)
        elif isinstance(a, dict) or isinstance(b, dict):
            differences += [{"item": item, "text": t} for t in _dict_differences(item, a, b)]
            if (a is None) != (b is None):
                differences.append({"item": item, "text": f"{item}: recorded by one run only"})
        elif a != b:
            differences.append({"item": item, "text": f"{item}: {a or 'not recorded'} vs {b or 'not recorded'}"})
    for role, env, name in (("baseline", base, base_name), ("candidate", cand, cand_name)):
        differences += [{"item": "drift", "text": f"{role} measured with allowed environment drift: {d}"}
                        for d in env.drift(name)]
    return {"differences": differences, "not_recorded": unrecorded}


def explanations(pair: dict[str, Any]) -> list[str]:
    """The recorded differences that can explain differing decisions or probabilities of a pair."""
    answers = pair.get("answers") or {}
    delta = answers.get("max_abs_probability_delta")
    if not answers.get("decision_flips") and not delta:
        return []
    found = [d["text"] for d in (pair.get("environment") or {}).get("differences", []) if d["item"] in NUMERIC_ITEMS]
    fla = [d for d in found if "fla" in d.lower()]
    where = f"{pair['workload']}/{pair['baseline_backend']}→{pair['candidate_backend']}"
    what = f"{len(answers.get('decision_flips') or [])} decision flips, max |Δp| {delta!r}"
    if not found:
        return [f"{where}: {what}; no recorded environment difference explains it"]
    lead = "FLA kernels in one run and not the other; " if fla else ""
    return [f"{where}: {what}; can be explained by {lead}" + "; ".join(found)]


def project_note(base: RunEnvironment, cand: RunEnvironment) -> str | None:
    """A line when the two runs ran different project code (or one cannot tell)."""
    a, b = base.project(), cand.project()
    if a["source_sha256"] and b["source_sha256"]:
        if a["source_sha256"] == b["source_sha256"]:
            return None
        return (f"the two runs ran different project code: source digest {a['source_sha256'][:12]} vs "
                f"{b['source_sha256'][:12]} (commits {_project_text(a)} vs {_project_text(b)})")
    if a["commit"] and b["commit"] and (a["commit"], a["dirty"]) == (b["commit"], b["dirty"]) and not a["dirty"]:
        return None
    return (f"the two runs may have run different project code: commits {_project_text(a) or 'not recorded'} vs "
            f"{_project_text(b) or 'not recorded'}; a source digest is recorded by "
            f"{'neither run' if not (a['source_sha256'] or b['source_sha256']) else 'one run only'}")

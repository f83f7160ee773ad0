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
        found = self.backends.get(backend)
        b: dict[str, Any] = found if isinstance(found, dict) else {}
        return {"packages": self._packages(b, backend), "implementations": _first_dict(b, "kernels", "implementations"),
                "dtype": _str(b.get("dtype")), "weights_fingerprint": _str(b.get("weights_fingerprint")),
                "project_commit": _project_text(self.project()), "project_source": self.project()["source_sha256"],
                "gpu": self.gpu(), "torch_threads": _threads(b),
                "cpu_model": _get(self.env, "cpu", "model") or _get(self.env, "host", "cpu_model"),
                "container_image": _image(_get(self.env, "container_images", backend))}

    def _packages(self, b: dict[str, Any], backend: str) -> dict[str, str | None] | None:
        packages = b.get("packages")
        if not isinstance(packages, dict):
            packages = _get(self.env, "backends", backend, "packages")
        return {k: _version(v) for k, v in packages.items()} if isinstance(packages, dict) else None

    def drift(self, backend: str) -> list[str]:
        found = _get(self.check, "backends", backend, "differences")
        return [str(d) for d in found] if isinstance(found, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _first_dict(b: dict[str, Any], *keys: str) -> dict | None:
    return next((b[k] for k in keys if isinstance(b.get(k), dict)), None)


def _threads(b: dict[str, Any]) -> str | None:
    threads = b.get("torch_threads")
    return None if threads is None or isinstance(threads, dict) else f"{threads}/{b.get('torch_interop_threads')}"


def _image(image: Any) -> str | None:
    if not isinstance(image, dict):
        return None
    return _get(image, "id") or json.dumps(image, sort_keys=True)[:80]


def _project_text(project: dict[str, Any]) -> str | None:
    if not project.get("commit"):
        return None
    return f"{str(project['commit'])[:12]}{' (dirty)' if project.get('dirty') else ''}"


def _dict_differences(item: str, a: dict, b: dict) -> list[str]:
    """Keys whose values differ, or that one run recorded with a value and the other did not."""
    missing = "not recorded"
    return [f"{item}.{k}: {a.get(k, missing)} vs {b.get(k, missing)}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and (a.get(k) or b.get(k))]


def _item_differences(item: str, a: Any, b: Any) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return _dict_differences(item, a, b)
    if isinstance(a, dict) or isinstance(b, dict):
        return [f"{item}: recorded by one run only"]
    return [] if a == b else [f"{item}: {a or 'not recorded'} vs {b or 'not recorded'}"]


def environment_differences(base: RunEnvironment, cand: RunEnvironment, base_name: str,
                            cand_name: str) -> dict[str, Any]:
    """Per item: the difference (baseline vs candidate), and which items neither run recorded."""
    ia, ib = base.items(base_name), cand.items(cand_name)
    differences = [{"item": item, "text": text} for item in ia if ia[item] is not None or ib[item] is not None
                   for text in _item_differences(item, ia[item], ib[item])]
    for role, env, name in (("baseline", base, base_name), ("candidate", cand, cand_name)):
        differences += [{"item": "drift", "text": f"{role} measured with allowed environment drift: {d}"}
                        for d in env.drift(name)]
    return {"differences": differences, "not_recorded": [i for i in ia if ia[i] is None and ib[i] is None]}


def _numeric_differences(pair: dict[str, Any]) -> list[dict[str, str]]:
    return [d for d in (pair.get("environment") or {}).get("differences", []) if d["item"] in NUMERIC_ITEMS]


def _fla_in_one_run(found: list[dict[str, str]]) -> bool:
    """FLA recorded (package or kernels) by one run and not the other: not a recipe's mere mention of it."""
    return any(d["item"] in ("packages", "implementations") and "fla" in d["text"].lower() for d in found)


def _explanation_texts(found: list[dict[str, str]]) -> list[str]:
    texts = ["FLA kernels in one run and not the other"] if _fla_in_one_run(found) else []
    texts += [d["text"] for d in found if d["item"] != "drift"]
    return texts + (["the allowed environment drift listed below"] if any(d["item"] == "drift" for d in found) else [])


def explanations(pair: dict[str, Any]) -> list[str]:
    """The recorded differences that can explain differing decisions or probabilities of a pair."""
    answers = pair.get("answers") or {}
    flips, delta = answers.get("decision_flips") or [], answers.get("max_abs_probability_delta")
    if not flips and not delta:
        return []
    found = _numeric_differences(pair)
    where = f"{pair['workload']}/{pair['baseline_backend']}→{pair['candidate_backend']}"
    what = f"{len(flips)} decision flips, max |Δp| {delta!r}"
    if not found:
        return [f"{where}: {what}; no recorded environment difference explains it"]
    return [f"{where}: {what}; can be explained by " + "; ".join(_explanation_texts(found))]


def _same_clean_commit(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a["commit"]) and a["commit"] == b["commit"] and a["dirty"] is False and b["dirty"] is False


def project_note(base: RunEnvironment, cand: RunEnvironment) -> str | None:
    """A line when the two runs ran different project code (or one cannot tell)."""
    a, b = base.project(), cand.project()
    if a["source_sha256"] and b["source_sha256"]:
        if a["source_sha256"] == b["source_sha256"]:
            return None
        return (f"the two runs ran different project code: source digest {a['source_sha256'][:12]} vs "
                f"{b['source_sha256'][:12]} (commits {_project_text(a)} vs {_project_text(b)})")
    if _same_clean_commit(a, b):
        return None
    recorded = "one run only" if a["source_sha256"] or b["source_sha256"] else "neither run"
    return (f"the two runs may have run different project code: commits {_project_text(a) or 'not recorded'} vs "
            f"{_project_text(b) or 'not recorded'}; a source digest is recorded by {recorded}")

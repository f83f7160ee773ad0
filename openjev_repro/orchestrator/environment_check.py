"""The study's environment check: after each backend is ready and before its first inference,
what it reports is compared with what the recipe declares (`environment`, `Backend.environment`).

Observed values come from the backend's /health (`packages`, `kernels`, `dtype`,
`weights_fingerprint`, `source_sha256`), packages falling back to environment.json (the
backend's interpreter, local runtime). Each difference is one phrase; without
--allow-environment-drift any difference stops the study (EnvironmentDrift, one `error:` line
naming every difference); with it the study goes on and every difference is recorded in
environment_check.json (copied into the manifest) and shown as a banner at the top of the report.

environment_check.json:
    {"format_version": 1, "allow_drift": bool, "project": {commit, dirty, source_sha256},
     "backends": {name: {"declared": {...}, "observed": {...}, "differences": [str, ...]}},
     "differences": [str, ...]}   # every backend's, prefixed "<backend>: "
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import InputMismatch, ReproError
from ..evidence.decoding import UnsetType, decode
from ..evidence.files import write_json_atomic
from ..evidence.recipe import EnvironmentSpec
from ..evidence.records import BackendCheck, EnvironmentCheckRecord, EnvironmentRecord, TritonCacheEntry
from ..evidence.rundir import RunDir
from ..hashing import tree_digest

__all__ = ["CHECK_FILE", "CHECK_FORMAT_VERSION", "EnvironmentCheck", "EnvironmentDrift", "differences", "observed"]

CHECK_FILE = "environment_check.json"
CHECK_FORMAT_VERSION = 1
ABSENT = "absent"


class EnvironmentDrift(ReproError):
    """A backend reports an environment other than the recipe declares."""


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _version_of(value: Any) -> str | None:
    return value if isinstance(value, str) else None  # absent: None or {"available": false, ...}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _packages(health: dict, environment: EnvironmentRecord | None, name: str) -> dict[str, str | None] | None:
    """/health `packages`, else environment.json's probe of the backend's interpreter."""
    packages = health.get("packages")
    if not isinstance(packages, dict) and environment is not None:
        packages = environment.backend_packages(name)
    return {_norm(str(k)): _version_of(v) for k, v in packages.items()} if isinstance(packages, dict) else None


def observed(health: dict, environment: EnvironmentRecord | None, name: str) -> dict[str, Any]:
    """What one backend reports about itself (None where it says nothing)."""
    kernels = health.get("kernels")
    return {"packages": _packages(health, environment, name),
            "implementations": dict(kernels) if isinstance(kernels, dict) else None,
            "dtype": _text(health.get("dtype")), "weights_fingerprint": _text(health.get("weights_fingerprint")),
            "source_sha256": _text(health.get("source_sha256"))}


def _package_difference(package: str, requirement: str, packages: dict[str, str | None] | None) -> str | None:
    if packages is None:
        return f"package {package}: recipe {requirement}, the backend reports no package versions"
    version = packages.get(_norm(package))
    if requirement == ABSENT:
        return None if version is None else f"package {package}: recipe absent, backend has {version}"
    if version is None:
        return f"package {package}: recipe {requirement}, not installed"
    text = requirement if requirement[:1] in "<>=!~" else f"=={requirement}"
    try:
        wanted = SpecifierSet(text)
        ok = Version(version) in wanted or version == requirement
    except (InvalidSpecifier, InvalidVersion):
        ok = version == requirement
    return None if ok else f"package {package}: recipe {requirement}, backend has {version}"


def _implementation_differences(spec: EnvironmentSpec, seen: dict[str, Any]) -> list[str]:
    impls = seen["implementations"] or {}
    return [f"implementations.{key}: recipe {want}, backend reports {impls.get(key) or 'nothing'}"
            for key, want in sorted(spec.implementations.items()) if impls.get(key) != want]


def _value_differences(spec: EnvironmentSpec, seen: dict[str, Any]) -> list[str]:
    return [f"{key}: recipe {getattr(spec, key)}, backend reports {seen[key] or 'nothing'}"
            for key in ("dtype", "weights_fingerprint") if getattr(spec, key) not in (None, seen[key])]


def _source_difference(seen: dict[str, Any], source_sha256: str | None) -> list[str]:
    theirs = seen["source_sha256"]
    if not source_sha256 or not theirs or theirs == source_sha256:
        return []
    return [(f"source_sha256: the study runs {source_sha256[:12]}, the backend runs {theirs[:12]} "
             "(different project code)")]


def differences(spec: EnvironmentSpec, seen: dict[str, Any], source_sha256: str | None = None) -> list[str]:
    """Every difference between a backend's declared and observed environment, one phrase each."""
    found = [d for package, req in sorted(spec.packages.items())
             if (d := _package_difference(package, req, seen["packages"])) is not None]
    return (found + _implementation_differences(spec, seen) + _value_differences(spec, seen)
            + _source_difference(seen, source_sha256))


class EnvironmentCheck:
    """Collects each backend's check into environment_check.json; raises on drift unless allowed."""

    def __init__(self, run: RunDir, allow_drift: bool, environment: EnvironmentRecord) -> None:
        self.run, self.allow_drift, self.environment = run, allow_drift, environment
        self.caches: dict[str, tuple[Path, str, str]] = {}
        self.record = EnvironmentCheckRecord(format_version=CHECK_FORMAT_VERSION, allow_drift=allow_drift,
                                             project=environment.project_ref)

    def _write(self, **changes: object) -> None:
        self.record = msgspec.structs.replace(self.record, **changes)
        write_json_atomic(self.run.file(CHECK_FILE), self.record.to_json())

    def triton_cache(self, name: str, spec: EnvironmentSpec, root: Path) -> dict[str, str]:
        """The backend's environment variables for a pinned Triton cache: its tree digest checked, a
        private copy made (Triton writes into its cache; the declared input is never changed)."""
        cache = spec.triton_cache
        if cache is None:
            return {}
        source = root / cache.dir
        if not source.is_dir() or source.is_symlink():
            raise InputMismatch(f"Backend {name}: the Triton cache {cache.dir} the recipe declares is not a "
                                f"directory under {root}.")
        found = tree_digest(source)["sha256"]
        if found != cache.sha256:
            raise InputMismatch(f"Backend {name}: the Triton cache {cache.dir} has tree digest {found}, the recipe "
                                f"declares {cache.sha256}; it is not the pinned cache.")
        copy = Path(tempfile.mkdtemp(prefix=f"openjev-triton-{name}-"))
        shutil.copytree(source, copy, dirs_exist_ok=True, symlinks=True)
        self.caches[name] = (copy, cache.dir, cache.sha256)
        return {"TRITON_CACHE_DIR": str(copy), "FLA_CACHE_RESULTS": "1"}

    def close_cache(self, name: str) -> None:
        """After the backend stopped: record whether its Triton cache stayed as pinned, remove the copy."""
        if name not in self.caches:
            return
        copy, rel, declared = self.caches.pop(name)
        after = tree_digest(copy)["sha256"]
        shutil.rmtree(copy, ignore_errors=True)
        entry = TritonCacheEntry(dir=rel, sha256=declared, after_sha256=after, unchanged=after == declared,
                                 note="unchanged: every autotuned kernel found its choice in the pinned cache; "
                                      "changed: some kernel autotuned or compiled anew on this host")
        caches = {} if isinstance(self.record.triton_cache, UnsetType) else self.record.triton_cache
        self._write(triton_cache={**caches, name: entry})

    def add_differences(self, found: list[str]) -> None:
        """Differences found after a backend ran (a pinned kernel cache that changed), measured with drift allowed."""
        if found:
            self._write(differences=[*self.record.differences, *found])

    def check(self, name: str, spec: EnvironmentSpec, health: dict) -> list[str]:
        seen = observed(health, self.environment, name)
        found = differences(spec, seen, self.record.project.source_sha256)
        check = decode({"declared": spec.model_dump(mode="json", exclude_defaults=True), "observed": seen,
                        "differences": found}, BackendCheck, f"backend {name}'s environment")
        self._write(backends={**self.record.backends, name: check},
                    differences=[*self.record.differences, *(f"{name}: {d}" for d in found)])
        if found and not self.allow_drift:
            raise EnvironmentDrift(f"Environment drift: backend {name} does not report what the recipe declares: "
                                   + "; ".join(found) + ". Fix the environment or the recipe, or pass "
                                   "--allow-environment-drift to measure anyway (every difference is recorded).")
        return found

"""Audit tools: verify, compare, claims, import, publish. Each reads evidence; none runs a backend.

The names below are imported on first use, so that `import openjev_repro.audit.verify` (what
`invoke verify` needs) does not load compare's, claims' and publish's modules too
(`openjev_repro.audit.publish` is the module; its function is `audit.publish.publish`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Check",
    "check_claims",
    "compare_runs",
    "format_checks",
    "import_system1",
    "load_claims",
    "load_tolerances",
    "verify_path",
]

_HOME = {"Check": "verify", "check_claims": "claims", "compare_runs": "compare", "format_checks": "verify",
         "import_system1": "importer", "load_claims": "claims", "load_tolerances": "compare", "verify_path": "verify"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)

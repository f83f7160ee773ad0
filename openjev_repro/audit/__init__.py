"""Audit tools: verify, compare, claims, import, publish. Each reads evidence; none runs a backend."""

from .claims import check_claims, load_claims
from .compare import compare_runs, load_tolerances
from .importer import import_system1
from .publish import publish
from .verify import Check, format_checks, verify_path

__all__ = [
    "Check",
    "check_claims",
    "compare_runs",
    "format_checks",
    "import_system1",
    "load_claims",
    "load_tolerances",
    "publish",
    "verify_path",
]

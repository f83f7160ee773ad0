"""The signed results manifest: in-toto statement, DSSE envelope, keys, environment capture.

The names below are imported on first use, so that a reader of one module (verify reads
`manifest.run_manifest` and `manifest.dsse`) does not load the environment collectors too.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "build_statement",
    "collect_environment",
    "generate_keypair",
    "keyid",
    "load_private_key",
    "load_public_key",
    "make_envelope",
    "pae",
    "parse_envelope",
    "read_statement",
    "verify_envelope",
    "write_manifest",
]

_HOME = {"PAYLOAD_TYPE": "dsse", "make_envelope": "dsse", "pae": "dsse", "parse_envelope": "dsse",
         "verify_envelope": "dsse", "collect_environment": "environment", "generate_keypair": "keys", "keyid": "keys",
         "load_private_key": "keys", "load_public_key": "keys", "PREDICATE_TYPE": "run_manifest",
         "STATEMENT_TYPE": "run_manifest", "build_statement": "run_manifest", "read_statement": "run_manifest",
         "write_manifest": "run_manifest"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)

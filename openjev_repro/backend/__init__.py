"""The reference backend: our /v1/systemone server around an Open-Jev DecisionModel.

Modules: package (checkpoint layout), prompts (validation, rendering), kernels (raw-mode
kernel blocking and checks), model (DecisionModel), graphs (CUDA Graph LRU), server (HTTP),
cli (`python -m openjev_repro.backend`), fixture (the tiny byte-stable test checkpoint),
synthetic (synthetic JevBench-format request files for the fixture tokenizer).
Heavy imports (torch, transformers) happen only inside functions, so importing this package is cheap.
"""

from __future__ import annotations

from .package import Package, package_sha256, read_package
from .prompts import MODEL_ALIASES, Question, RequestInvalid, parse_request, render_text

__all__ = [
           "MODEL_ALIASES",
           "Package",
           "Question",
           "RequestInvalid",
           "package_sha256",
           "parse_request",
           "read_package",
           "render_text",
]

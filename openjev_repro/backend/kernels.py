"""Which linear-attention kernels a model is bound to, and how raw mode forces the references.

Transformers decides at import time of `modeling_qwen3_5` whether to bind flash-linear-attention
(FLA) and causal-conv1d. The published "Raw HF" baseline makes both availability checks return
False *before* the model classes are imported, so every Gated DeltaNet layer falls back to the
PyTorch references. Module layouts differ between Transformers releases, so `block_optional_kernels`
patches every copy of the checks it can find, hides the two packages from `importlib` (newer
releases, e.g. 5.17, resolve kernels by importing the package inside a decorator at module import),
and, if the modeling module was imported already, resets its module-level kernel bindings. `bound_implementations` then reads what each layer
really holds (a `BoundKernels`), and `BoundKernels.require_reference` refuses anything else.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec

from ..errors import BackendError

__all__ = ["BoundKernels", "block_optional_kernels", "bound_implementations"]

_CHECKS = ("is_flash_linear_attention_available", "is_causal_conv1d_available")
_KERNEL_GLOBALS = ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                   "fused_recurrent_gated_delta_rule", "FusedRMSNormGated")
_MODELING = "transformers.models.qwen3_5.modeling_qwen3_5"
_PACKAGES = ("fla", "causal_conv1d")
# The PyTorch references, named as `bound_implementations` names them: what every raw-mode layer must hold.
TORCH_DELTA_RULE, TORCH_CONV, TORCH_NORM = "torch_chunk_gated_delta_rule", "torch (F.conv1d)", "Qwen3_5RMSNormGated"


def _false(*_args: Any, **_kwargs: Any) -> bool:
    return False


def block_optional_kernels() -> list[str]:
    """Make every availability check for FLA and causal-conv1d answer False; return what was patched."""
    from transformers.utils import import_utils

    patched = []
    for package in _PACKAGES:  # `import fla` and `import causal_conv1d` raise ImportError from now on
        if sys.modules.get(package, "absent") is not None:
            sys.modules[package] = None  # type: ignore[assignment]
            patched.append(f"sys.modules[{package!r}]")
    for name in _CHECKS:
        if hasattr(import_utils, name):
            setattr(import_utils, name, _false)
            patched.append(f"transformers.utils.import_utils.{name}")
    return [*patched, *_patch_copied_checks(import_utils), *_unbind_modeling_kernels()]


def _patch_copied_checks(import_utils: Any) -> list[str]:
    """Copies bound by `from ... import name` in transformers modules imported before us."""
    patched = []
    for mod_name, module in list(sys.modules.items()):
        if not mod_name.startswith("transformers") or module is None or module is import_utils:
            continue
        namespace = getattr(module, "__dict__", {})  # never getattr: lazy modules would import
        for name in _CHECKS:
            if callable(namespace.get(name)) and namespace[name] is not _false:
                setattr(module, name, _false)
                patched.append(f"{mod_name}.{name}")
    return patched


def _unbind_modeling_kernels() -> list[str]:
    """If the modeling module was imported already, undo its import-time kernel bindings."""
    modeling = sys.modules.get(_MODELING)
    if modeling is None:
        return []
    patched = []
    for name in _KERNEL_GLOBALS:
        if modeling.__dict__.get(name) is not None:
            setattr(modeling, name, None)
            patched.append(f"{_MODELING}.{name}")
    if hasattr(modeling, "is_fast_path_available"):
        modeling.is_fast_path_available = False  # type: ignore[attr-defined]
    return patched


def _name(obj: Any) -> str:
    if obj is None:
        return "None"
    module = getattr(obj, "__module__", "") or ""
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module else name


def _implementation(fn: Any) -> tuple[Any, bool]:
    """(what `fn` really calls, whether that is the PyTorch reference).

    Transformers 5.10 binds FLA / causal-conv1d functions (or None) as layer attributes; later
    releases wrap the reference in a decorator whose closure holds `implementation` and
    `torch_function`. `functools.wraps` copies the reference's name, so the closure is what counts.
    """
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is not None and closure and "implementation" in code.co_freevars:
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in closure), strict=True))
        impl = cells["implementation"]
        return impl, impl is cells.get("torch_function", impl)
    return fn, getattr(fn, "__name__", "").startswith("torch_")


def _kernel(attn: Any, attribute: str, module_global: str) -> Any:
    """The function a layer calls: its attribute (5.10) or its modeling module's global (later)."""
    if attribute in vars(attn):
        return vars(attn)[attribute]
    module = sys.modules.get(type(attn).__module__)
    return getattr(module, module_global, None) if module is not None else None


class BoundKernels(msgspec.Struct, frozen=True, kw_only=True):
    """The kernels a `Qwen3_5TextModel`'s layers call: /health `implementations` and every answer's
    metadata (`to_json()`, in this order). Each kernel slot lists every implementation its layers hold."""

    linear_attention_layers: int
    full_attention_layers: int
    full_attention: str  # the configured attention implementation (sdpa in both modes)
    chunk_gated_delta_rule: list[str]
    causal_conv1d_fn: list[str]
    norm: list[str]

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    def require_reference(self) -> BoundKernels:
        """Raw mode: every linear-attention layer on the PyTorch references and stock SDPA, else BackendError."""
        if self.linear_attention_layers == 0:
            raise BackendError("Raw mode found no linear-attention layers to check; is this a Qwen3.5 model?")
        for slot, found, expected in (("chunk_gated_delta_rule", self.chunk_gated_delta_rule, TORCH_DELTA_RULE),
                                      ("causal_conv1d_fn", self.causal_conv1d_fn, TORCH_CONV),
                                      ("norm", self.norm, TORCH_NORM)):
            if found != [expected]:
                raise BackendError(
                    f"Raw mode requires every linear-attention layer to use {expected} for {slot}, "
                    f"but found {found}; optional kernels were imported before they could be blocked.")
        if self.full_attention != "sdpa":
            raise BackendError(f"Raw mode requires stock SDPA for full attention, found {self.full_attention}.")
        return self


def bound_implementations(model: Any) -> BoundKernels:
    """What every linear-attention layer of a `Qwen3_5TextModel` is bound to."""
    rules, convs, norms = set(), set(), set()
    layers = [attn for layer in getattr(model, "layers", []) if (attn := getattr(layer, "linear_attn", None)) is not None]
    for attn in layers:
        impl, reference = _implementation(_kernel(attn, "chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"))
        rules.add(TORCH_DELTA_RULE if reference else _name(impl))
        conv = _kernel(attn, "causal_conv1d_fn", "causal_conv1d_fn")
        impl, reference = _implementation(conv) if conv is not None else (None, True)
        convs.add(TORCH_CONV if reference else _name(impl))
        norms.add(type(getattr(attn, "norm", None)).__name__)
    full = sum(1 for layer in getattr(model, "layers", []) if getattr(layer, "self_attn", None) is not None)
    attn_impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return BoundKernels(linear_attention_layers=len(layers), full_attention_layers=full, full_attention=str(attn_impl),
                        chunk_gated_delta_rule=sorted(rules), causal_conv1d_fn=sorted(convs), norm=sorted(norms))

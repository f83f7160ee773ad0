"""`--kernels reference|fla|auto`: the backend's linear-attention kernels forced, checked and reported.

    reference  FLA and causal-conv1d blocked before the model classes are imported (as raw mode
               always does): every Gated DeltaNet layer runs the PyTorch references.
    fla        FLA must be importable (else the backend refuses to start, before binding) and every
               layer must end up bound to it (else loading fails); fast mode only.
    auto       what Transformers binds by itself (FLA whenever importable): the old behaviour.

/health then reports `kernels` (the short names a recipe's `environment.implementations`
declares), `packages` (versions this interpreter imports), `source_sha256` (the digest of the
project's source files as they ran) and, once FLA's Triton autotuner has run, `autotune` (the
configuration each autotuned kernel chose, per autotune key).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

import msgspec

from ..errors import ReproError
from .kernels import TORCH_CONV, TORCH_DELTA_RULE, TORCH_NORM, BoundKernels

__all__ = ["KERNEL_CHOICES", "KernelNames", "apply_kernel_choice", "autotune_choices", "package_versions"]

KERNEL_CHOICES = ("auto", "reference", "fla")
PACKAGES = ("torch", "transformers", "peft", "accelerate", "tokenizers", "safetensors",
            "flash-linear-attention", "fla-core", "triton", "causal-conv1d")


def apply_kernel_choice(choice: str, mode: str) -> None:
    """Before the model is loaded (and before the port is bound): force or require the kernels."""
    if choice == "fla":
        if mode == "raw":
            raise ReproError("--kernels fla: raw mode always runs the PyTorch reference kernels; "
                             "use --mode fast or --kernels reference.")
        if importlib.util.find_spec("fla") is None:
            raise ReproError("--kernels fla: FLA (flash-linear-attention) is not importable by "
                             f"{sys.executable}; install it (e.g. the fla-core and flash-linear-attention "
                             "wheels) or use --kernels reference.")
    elif choice == "reference":
        from .kernels import block_optional_kernels

        block_optional_kernels()


def _short(names: list[str], reference: str, fast: dict[str, str]) -> str:
    if names == [reference]:
        return "reference"
    for prefix, short in fast.items():
        if names and all(n.startswith(prefix) for n in names):
            return short
    return ",".join(names) or "none"


class KernelNames(msgspec.Struct, frozen=True, kw_only=True):
    """/health `kernels`: --kernels as requested and the bound kernels by the short names a recipe's
    `environment.implementations` declares (reference | fla | causal_conv1d)."""

    requested: str
    linear_attention: str
    conv: str
    norm: str
    full_attention: str

    @classmethod
    def of(cls, requested: str, bound: BoundKernels) -> KernelNames:
        return cls(requested=requested,
                   linear_attention=_short(bound.chunk_gated_delta_rule, TORCH_DELTA_RULE, {"fla.": "fla"}),
                   conv=_short(bound.causal_conv1d_fn, TORCH_CONV, {"causal_conv1d": "causal_conv1d"}),
                   norm=_short(bound.norm, TORCH_NORM, {"FusedRMSNormGated": "fla"}),
                   full_attention=bound.full_attention)

    def to_json(self) -> dict[str, str]:
        return msgspec.to_builtins(self)

    def checked(self) -> KernelNames:
        """After loading: the layers hold what --kernels asked for (else ReproError)."""
        if self.requested == "fla" and self.linear_attention != "fla":
            raise ReproError(f"--kernels fla: the linear-attention layers are bound to {self.linear_attention}, "
                             "not FLA; this Transformers release did not bind it.")
        if self.requested == "reference" and self.linear_attention != "reference":
            raise ReproError(f"--kernels reference: the linear-attention layers are bound to "
                             f"{self.linear_attention}; optional kernels were imported before they could be blocked.")
        return self


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None: not installed)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def autotune_choices() -> dict[str, dict[str, str]]:
    """Per Triton autotuner of a loaded FLA module: autotune key -> the configuration it chose.

    Triton's `Autotuner` keeps its choices in `.cache` (key tuple -> Config); nothing here runs a kernel."""
    chosen: dict[str, dict[str, str]] = {}
    for mod_name, module in list(sys.modules.items()):
        if module is None or not mod_name.startswith("fla."):
            continue
        for attr, obj in list(vars(module).items()):
            cache = getattr(obj, "cache", None) if hasattr(obj, "configs") else None
            if isinstance(cache, dict) and cache:
                chosen[f"{mod_name}.{attr}"] = {str(key): str(config) for key, config in sorted(
                    cache.items(), key=lambda kv: str(kv[0]))}
    return chosen

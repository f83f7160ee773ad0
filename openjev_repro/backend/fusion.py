"""Fast mode's fused elementwise work (`--compile`): RMSNorm and the MLP's SiLU gate, each one kernel.

The H200 profile of fast mode (results/h200-fast-27b-shape/profile/) showed that outside the
GEMMs most GPU time and most of the ~4,000 kernels of one forward are small elementwise
kernels, and the largest share comes from `Qwen3_5RMSNorm`: every one of its 161 calls per
forward (two per layer, the final norm, and the q/k norms of the 16 attention layers) runs
about ten kernels (casts to FP32 and back, square, mean, add, rsqrt, two multiplies). Here
each norm and each `silu(gate) * up` becomes one function that `torch.compile` (Inductor,
dynamic lengths) turns into one fused kernel. The arithmetic is the library's own, written
out once: FP32 throughout the norm, `(x * rsqrt(mean(x^2) + eps)) * (1 + w)` cast back to the
input dtype; the MLP is `down(silu(gate(x)) * up(x))`. Inductor may order the mean's
additions differently, so results can differ from the unfused modules in the last bits.

Only module instances are patched (their `forward`), never the library's classes, so a raw
model in the same process is unaffected. `compiler` is `torch.compile` by default; tests pass
the identity to check the arithmetic against the library's modules without a compiler.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["compile_function", "fuse_elementwise", "rms_norm", "silu_mul"]


def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """Qwen3.5's RMSNorm: computed in FP32, scaled by (1 + weight), cast back to x's dtype."""
    import torch

    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).type_as(x)


def silu_mul(gate: Any, up: Any) -> Any:
    import torch

    return torch.nn.functional.silu(gate) * up


def compile_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compile (Inductor) for dynamic lengths: how `--compile` fuses a pure elementwise function.

    A function marked `keep_roundings = True` is compiled with Inductor's `emulate_precision_casts`:
    by default Inductor keeps a fused kernel's intermediates in FP32 and drops the library's BF16
    roundings in between (even an explicit `.to(bfloat16).float()`), which moved the gated norm's
    output in 35% of its elements on the H200 and the probabilities 0.024 from raw (profile-2026-12-02)."""
    import torch

    options: dict[str, str | int | bool | Callable[..., Any]] | None = (
        {"emulate_precision_casts": True} if getattr(fn, "keep_roundings", False) else None)
    return torch.compile(fn, dynamic=True, options=options)


def fuse_elementwise(model: Any, compiler: Callable[[Callable[..., Any]], Callable[..., Any]] = compile_function) -> str:
    """Patch every Qwen3.5 RMSNorm and SiLU MLP of `model` to the fused functions; describe what was patched."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    norm, gate = compiler(rms_norm), compiler(silu_mul)

    def norm_forward(self: Any, x: Any) -> Any:
        return norm(x, self.weight, self.eps)

    def mlp_forward(self: Any, x: Any) -> Any:
        return self.down_proj(gate(self.gate_proj(x), self.up_proj(x)))

    norms = mlps = 0
    for module in model.modules():
        if type(module) is qwen.Qwen3_5RMSNorm:
            # patching this instance's forward is the point (the class and other models keep theirs)
            module.forward = types.MethodType(norm_forward, module)  # type: ignore[method-assign]
            norms += 1
        elif type(module) is qwen.Qwen3_5MLP and getattr(module.config, "hidden_act", None) == "silu":
            module.forward = types.MethodType(mlp_forward, module)  # type: ignore[method-assign]
            mlps += 1
    return f"fused RMSNorm ({norms} modules) and SiLU gate ({mlps} MLPs), torch.compile (inductor, dynamic lengths)"

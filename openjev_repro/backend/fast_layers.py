"""Fast mode's fusions of the Qwen3.5 layers (`--fuse`), each one a named option so variants run side by side.

    conv-silu     the Gated DeltaNet's depthwise causal conv and its SiLU as one Triton kernel on the
                  projection's own layout (`conv_silu.py`): no transposes, no separate SiLU pass
    concat-in-proj  at load, the four linear-attention input projections (qkv, z, b, a) become one
                  weight matrix: one GEMM instead of four (the old weights are freed). On the H200 at 96
                  rows 0.111 -> 0.065 ms a layer (scripts/h200-kernel-check.py)
    concat-gate-up  at load, the MLP's gate and up projections become one weight matrix. Measured on
                  the H200 it is slower at 96 rows (0.115 -> 0.150 ms) and at 2312 (1.10 -> 1.17 ms),
                  faster only at 300 (0.24 -> 0.18 ms), so it is not part of `all`
    add-norm      each layer's residual add and the following RMSNorm as one function (one kernel with
                  `--compile`, which compiles it like `fusion.py`'s norm; eager it is the library's
                  arithmetic)
    gated-norm    the linear attention's gated RMSNorm (`Qwen3_5RMSNormGated`: norm, weight, times
                  SiLU(z)) as one function: one kernel with `--compile` instead of about ten (the H200
                  profile of 2026-12-01 put it at about 13.5 ms of 2312 tokens); eager it is the
                  library's arithmetic, bit for bit; compiled with Inductor's precision-cast emulation,
                  so the library's intermediate BF16 roundings stay (without it 35% of the outputs moved)
    grouped-qk    hand FLA's chunked gated delta rule the 16 query/key heads as they are, instead of
                  `repeat_interleave` to the 48 value heads (FLA 0.6.0 maps value head i to key head
                  i // 3 itself, "GVA"); with the PyTorch reference kernel q and k are still repeated
    beta-g        the delta rule's beta = sigmoid(b) and decay g = -exp(A_log) * softplus(a + dt_bias) as
                  one function: one kernel with `--compile` instead of about eight per layer; eager it is
                  the library's arithmetic
    silu-mul      the MLP's silu(gate) * up as one fixed-size Triton kernel (`gate_kernels.py`) with the
                  library's roundings, in place of Inductor's dynamic-length kernel under `--compile`
                  (2.20 -> 4.18 TB/s at 2312 tokens on the H200)
    silu-mul-fp32 the same kernel in FP32 with one rounding at the end, the arithmetic of Inductor's fused
                  kernel (the rounded one moved a probability past the decision rule: profile-2026-12-02c)
    triton-gated-norm  the linear attention's gated RMSNorm as one fixed-size Triton kernel
                  (`gate_kernels.py`) that reads z in place in the projection (no copy), in place of
                  `gated-norm`'s compiled function

Only module instances are patched (their `forward`), never the library's classes. The patched forwards
serve this backend's one case only: batch 1, no cache, no padding mask; anything else goes to the
library's own forward. `apply_fusions` runs after the weights fingerprints are taken, so the
fingerprints describe the checkpoint's weights, not their concatenation.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import BackendError
from . import gate_kernels
from .kernels import _implementation, _kernel

__all__ = ["ALL", "FUSIONS", "add_rms_norm", "apply_fusions", "beta_and_decay", "gated_rms_norm", "parse_fusions"]

FUSIONS = ("conv-silu", "concat-in-proj", "concat-gate-up", "add-norm", "gated-norm", "grouped-qk", "beta-g",
           "silu-mul", "silu-mul-fp32", "triton-gated-norm")
ALL = ("conv-silu", "concat-in-proj", "add-norm")   # what `all` means: the fusions that measured faster


def parse_fusions(text: str) -> tuple[str, ...]:
    """'conv-silu,add-norm' -> ('conv-silu', 'add-norm'); 'all' -> ALL; '' or 'none' -> ()."""
    if text.strip() in ("", "none"):
        return ()
    if text.strip() == "all":
        return ALL
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in FUSIONS]
    if unknown:
        raise BackendError(f"Unknown fusion {unknown[0]!r}; use a comma list of {', '.join(FUSIONS)}, all ({', '.join(ALL)}) or none.")
    return tuple(n for n in FUSIONS if n in names)


def add_rms_norm(residual: Any, update: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    """(residual + update, Qwen3.5 RMSNorm of that sum): the library's add in the input dtype, its norm in FP32."""
    import torch

    total = residual + update
    h = total.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return total, (h * (1.0 + weight.float())).type_as(total)


gated_rms_norm = gate_kernels.library_gated_rms_norm   # the library's arithmetic, compiled by `gated-norm`


def beta_and_decay(b: Any, a: Any, a_log: Any, dt_bias: Any) -> tuple[Any, Any]:
    """The delta rule's (beta, g), the library's arithmetic: sigmoid(b); -exp(A_log) * softplus(a + dt_bias) in FP32."""
    import torch

    return b.sigmoid(), -a_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias)


# ----------------------------------------------------------------------------- Gated DeltaNet


def _concatenated(parts: tuple[Any, ...]) -> Any:
    """One bias-free Linear whose weight is the parts' weights one after the other (the caller drops the parts)."""
    import torch

    with torch.no_grad():
        weight = torch.cat([p.weight for p in parts], dim=0)
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    linear.weight = torch.nn.Parameter(weight, requires_grad=False)
    return linear


def _projections(self: Any, hidden: Any) -> tuple[Any, Any, Any, Any]:
    """(mixed_qkv [B, T, C], z, b, a) from one concatenated GEMM or the library's four."""
    if hasattr(self, "in_proj_all"):
        qkv, z, b, a = self.in_proj_all(hidden).split(self.in_proj_splits, dim=-1)
        return qkv, z, b, a
    return self.in_proj_qkv(hidden), self.in_proj_z(hidden), self.in_proj_b(hidden), self.in_proj_a(hidden)


def _conv(self: Any, mixed_qkv: Any) -> Any:
    """The library's causal conv + SiLU on [B, T, C] (the fused kernel is called by the forward itself)."""
    weight = self.conv1d.weight.squeeze(1)
    library = _kernel(self, "causal_conv1d_fn", "causal_conv1d_fn")
    x = mixed_qkv.transpose(1, 2)
    if library is None:   # Transformers 5.10 without causal-conv1d: the module's own conv
        import torch
        return torch.nn.functional.silu(self.conv1d(x)[:, :, : x.shape[-1]]).transpose(1, 2)
    return library(x, weight, self.conv1d.bias, activation=self.activation).transpose(1, 2)


def gated_deltanet_forward(self: Any, hidden_states: Any, cache_params: Any = None, attention_mask: Any = None,
                           **kwargs: Any) -> Any:
    """The library's Gated DeltaNet forward for batch 1 without cache or mask, with the chosen fusions."""
    import torch

    if cache_params is not None or attention_mask is not None or hidden_states.shape[0] != 1:
        return self.library_forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
    batch, seq_len, _ = hidden_states.shape
    mixed_qkv, z, b, a = _projections(self, hidden_states)
    if self.fused_conv:   # q, k and v come out of the kernel contiguous: FLA copies none of them
        from .conv_silu import conv_silu
        query, key, value = conv_silu(mixed_qkv, self.conv1d.weight.squeeze(1), self.conv1d.bias,
                                      splits=(self.key_dim, self.key_dim, self.value_dim))
    else:
        query, key, value = torch.split(_conv(self, mixed_qkv), [self.key_dim, self.key_dim, self.value_dim], dim=-1)
    query = query.reshape(batch, seq_len, -1, self.head_k_dim)
    key = key.reshape(batch, seq_len, -1, self.head_k_dim)
    value = value.reshape(batch, seq_len, -1, self.head_v_dim)
    beta, g = getattr(self, "beta_g", beta_and_decay)(b, a, self.A_log, self.dt_bias)
    chunk = _kernel(self, "chunk_gated_delta_rule", "torch_chunk_gated_delta_rule")
    grouped = getattr(self, "grouped_qk", False) and not _implementation(chunk)[1]   # FLA takes H < HV itself
    if self.num_v_heads // self.num_k_heads > 1 and not grouped:
        query = query.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
        key = key.repeat_interleave(self.num_v_heads // self.num_k_heads, dim=2)
    core, _state = chunk(query, key, value, g=g, beta=beta, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=True)
    # z stays copied to [T * heads, head dim]: reading it in place (a strided view into the compiled gated
    # norm) measured 0.3 ms faster on the H200 but gave other probabilities in each process
    # (results/h200-fast-27b-shape/profile-2026-12-02b/README.md).
    if getattr(self, "gate_in_place", False):   # the Triton gated norm reads z [T, heads * dim] in place
        core = self.norm(core.reshape(-1, self.head_v_dim), z[0])
    else:
        core = self.norm(core.reshape(-1, self.head_v_dim), z.reshape(-1, self.head_v_dim))
    return self.out_proj(core.reshape(batch, seq_len, -1))


# ----------------------------------------------------------------------------- MLP and decoder layer


def _mlp_forward(gate_mul: Callable[[Any, Any], Any], concatenated: bool) -> Callable[..., Any]:
    """The MLP's forward with `gate_mul` for silu(gate) * up, on one concatenated GEMM or the library's two."""
    def forward(self: Any, x: Any) -> Any:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1) if concatenated else (self.gate_proj(x), self.up_proj(x))
        return self.down_proj(gate_mul(gate, up))
    return forward


def _layer_forward(add_norm: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, hidden_states: Any, position_embeddings: Any = None, attention_mask: Any = None,
                position_ids: Any = None, past_key_values: Any = None, **kwargs: Any) -> Any:
        residual = hidden_states
        hidden = self.input_layernorm(hidden_states)
        if hasattr(self, "linear_attn"):   # 5.10 names it layer_type, 5.17 block_type
            hidden = self.linear_attn(hidden_states=hidden, cache_params=past_key_values,
                                      attention_mask=attention_mask, **kwargs)
        else:
            hidden, _ = self.self_attn(hidden_states=hidden, attention_mask=attention_mask, position_ids=position_ids,
                                       past_key_values=past_key_values, position_embeddings=position_embeddings,
                                       **kwargs)
        norm = self.post_attention_layernorm
        residual, hidden = add_norm(residual, hidden, norm.weight, norm.eps)
        return residual + self.mlp(hidden)
    return forward


def _identity(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def _gated_norm_forward(gated_norm: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, hidden_states: Any, gate: Any = None) -> Any:
        if gate is None:   # the library's module would fail too; keep its own error
            return self.library_forward(hidden_states, gate)
        eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
        return gated_norm(hidden_states, gate, self.weight, eps)
    return forward


def _set_forward(module: Any, forward: Callable[..., Any]) -> None:
    setattr(module, "forward", types.MethodType(forward, module))  # noqa: B010 - this instance only, on purpose


_LINEAR_ATTENTION = {"conv-silu", "concat-in-proj", "grouped-qk", "beta-g", "triton-gated-norm"}


class _Functions(NamedTuple):
    """The functions the patched forwards call, compiled once (under `--compile`) and shared by all layers."""

    gate_mul: Callable[[Any, Any], Any]   # the MLP's silu(gate) * up
    add_norm: Callable[..., Any]
    gated_norm: Callable[..., Any]
    beta_g: Callable[..., Any]
    triton_gate: Callable[[Any, Any], Any] | None   # the Triton MLP gate a fusion names, if any


def _patch_linear_attention(attn: Any, fusions: set[str], functions: _Functions) -> None:
    if "concat-in-proj" in fusions:
        parts = (attn.in_proj_qkv, attn.in_proj_z, attn.in_proj_b, attn.in_proj_a)
        attn.in_proj_splits = [p.weight.shape[0] for p in parts]
        for name in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"):
            delattr(attn, name)
        attn.in_proj_all = _concatenated(parts)
    setattr(attn, "fused_conv", "conv-silu" in fusions)  # noqa: B010
    setattr(attn, "grouped_qk", "grouped-qk" in fusions)  # noqa: B010
    if "beta-g" in fusions:
        setattr(attn, "beta_g", functions.beta_g)  # noqa: B010
    setattr(attn, "gate_in_place", "triton-gated-norm" in fusions)  # noqa: B010
    setattr(attn, "library_forward", attn.forward)  # noqa: B010
    _set_forward(attn, gated_deltanet_forward)


def _patch(module: Any, qwen: Any, fusions: set[str], functions: _Functions) -> str | None:
    """Patch one module if a fusion applies to it; the name it is counted under, or None."""
    kind = type(module)
    if kind is qwen.Qwen3_5GatedDeltaNet and fusions & _LINEAR_ATTENTION:
        _patch_linear_attention(module, fusions, functions)
        return "linear attention"
    if kind is qwen.Qwen3_5MLP and "concat-gate-up" in fusions:
        parts = (module.gate_proj, module.up_proj)
        del module.gate_proj, module.up_proj
        module.gate_up_proj = _concatenated(parts)
        _set_forward(module, _mlp_forward(functions.triton_gate or functions.gate_mul, concatenated=True))
        return "MLPs"
    if kind is qwen.Qwen3_5MLP and functions.triton_gate is not None:
        _set_forward(module, _mlp_forward(functions.triton_gate, concatenated=False))
        return "MLPs"
    if kind is qwen.Qwen3_5DecoderLayer and "add-norm" in fusions:
        _set_forward(module, _layer_forward(functions.add_norm))
        return "layers"
    if kind is qwen.Qwen3_5RMSNormGated and fusions & {"gated-norm", "triton-gated-norm"}:
        setattr(module, "library_forward", module.forward)  # noqa: B010
        norm = gate_kernels.gated_rms_norm if "triton-gated-norm" in fusions else functions.gated_norm
        _set_forward(module, _gated_norm_forward(norm))
        return "gated norms"
    return None


def apply_fusions(model: Any, fusions: tuple[str, ...],
                  compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> str:
    """Patch `model` (a Qwen3_5TextModel) with the named fusions; describe what was patched.

    `compiler` compiles the add-norm and SiLU-gate functions (torch.compile under `--compile`); None runs
    them eagerly, with the library's arithmetic."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from .fusion import silu_mul

    compile_fn = compiler or _identity
    triton_gate = (gate_kernels.silu_mul if "silu-mul" in fusions   # `silu-mul` wins over `silu-mul-fp32`
                   else gate_kernels.silu_mul_fp32 if "silu-mul-fp32" in fusions else None)
    functions = _Functions(gate_mul=compile_fn(silu_mul), add_norm=compile_fn(add_rms_norm),
                           gated_norm=compile_fn(gated_rms_norm), beta_g=compile_fn(beta_and_decay),
                           triton_gate=triton_gate)
    counts = {"linear attention": 0, "MLPs": 0, "layers": 0, "gated norms": 0}
    for module in model.modules():
        patched = _patch(module, qwen, set(fusions), functions)
        if patched:
            counts[patched] += 1
    done = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    return f"{', '.join(fusions)} ({done or 'nothing matched'})"

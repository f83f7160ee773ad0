"""Fast mode's two gates as fixed-size Triton kernels (`--fuse silu-mul` or `silu-mul-fp32`, `triton-gated-norm`).

`--compile` fuses the MLP's `silu(gate) * up` and the linear attention's gated RMSNorm with Inductor for
dynamic lengths. On the H200 those dynamic-shape kernels ran at about half the copy bandwidth: at 2312
tokens `silu(gate) * up` took 109.9 us (2.20 TB/s) where the same function compiled for one fixed shape
took 57.2 us (4.22 TB/s), and the gated norm 68.8 us a call for 85 MB (`scripts/h200-kernel-check.py
--checks silu-mul`, results/h200-fast-27b-shape/profile-2026-12-02c/). A fixed-shape compile cannot
serve 74 lengths, so here each gate is one Triton kernel with fixed block sizes, for any length:

    silu_mul          out = round(round(silu(gate)) * up)          silu in FP32 on the BF16 gate
    (rounded=False)   out = round(gate * sigmoid(gate) * up)        all in FP32, one rounding: the
                                                                   arithmetic Inductor fuses it to
    gated_rms_norm    h = round(x * rsqrt(mean(x^2) + eps))         FP32, mean over the last dim
                      out = round(round(weight * h) * silu(gate))  silu(gate) in FP32

with round() the cast to the input dtype: the rounding points of the library's eager arithmetic
(`torch.nn.functional.silu(gate) * up`; `Qwen3_5RMSNormGated`), which Inductor's fused kernel drops
for `silu(gate) * up`; `silu-mul-fp32` keeps Inductor's single rounding instead, so that the kernel's
speed comes without moving the probabilities of the compiled configuration (whether it matches
Inductor's kernel bit for bit on the GPU is for `scripts/h200-kernel-check.py --checks gates`). On
the H200 the rounded kernel was bit-identical to eager; in the signed study of 2026-12-02 it moved
one probability 0.0219 from raw, past the 0.0204 rule (results/h200-fast-27b-shape/profile-2026-12-02c/).
The gated norm reads the gate (the projection's z) in place through a token stride, so the
[tokens, heads * dim] column slice of the wider projection needs no copy.

No autotuning: the same input gives the same bits in every process. The sum of squares is a tree
reduction in FP32 (not torch's order), so on the GPU `gated_rms_norm` may differ from the library's
module in the last bit of a few outputs. The functions run the kernels on CUDA tensors and on CPU
tensors under Triton's interpreter (`TRITON_INTERPRET=1`, how the tests check them without a GPU);
otherwise they run the `*_reference` functions, the library's arithmetic in PyTorch.
"""

from __future__ import annotations

from typing import Any

from .conv_silu import use_triton

__all__ = ["NORM_ROWS", "SILU_BLOCK", "gated_rms_norm", "gated_rms_norm_reference", "library_gated_rms_norm",
           "silu_mul", "silu_mul_fp32", "silu_mul_reference"]

SILU_BLOCK = 4096   # elements a program; 8 warps (4.18 TB/s at 2312 tokens on the H200)
NORM_ROWS = 16      # rows of `dim` elements a program
_KERNELS: dict[str, Any] = {}


def silu_mul_reference(gate: Any, up: Any, rounded: bool = True) -> Any:
    import torch

    if rounded:
        return torch.nn.functional.silu(gate) * up
    g = gate.float()
    return (g * torch.sigmoid(g) * up.float()).to(gate.dtype)


def library_gated_rms_norm(x: Any, gate: Any, weight: Any, eps: float) -> Any:
    """Qwen3.5's gated RMSNorm, the library's arithmetic: FP32 norm, cast, times weight, times SiLU(gate) in FP32."""
    import torch

    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight * h.to(x.dtype)
    return (h * torch.nn.functional.silu(gate.float())).to(x.dtype)


library_gated_rms_norm.keep_roundings = True   # type: ignore[attr-defined]  # compiled, the BF16 roundings stay (fusion.py)


def gated_rms_norm_reference(x: Any, gate: Any, weight: Any, eps: float) -> Any:
    """`library_gated_rms_norm` on x [rows, dim] with the gate reshaped to x's shape."""
    return library_gated_rms_norm(x, gate.reshape(x.shape), weight, eps)


def _build() -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def silu_mul_kernel(g_ptr, u_ptr, o_ptr, n, ROUNDED: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        g = tl.load(g_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        if ROUNDED:
            s = (g / (1.0 + tl.exp(-g))).to(o_ptr.dtype.element_ty).to(tl.float32)
        else:
            s = g * tl.sigmoid(g)
        tl.store(o_ptr + offs, (s * u).to(o_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def gated_norm_kernel(x_ptr, g_ptr, w_ptr, o_ptr, rows, heads, stride_gt, eps,
                          DIM: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr):
        r = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
        d = tl.arange(0, BD)
        ok = (r < rows)[:, None] & (d < DIM)[None, :]
        x = tl.load(x_ptr + r[:, None] * DIM + d[None, :], mask=ok, other=0.0).to(tl.float32)
        var = tl.sum(x * x, axis=1) * (1.0 / DIM)
        h = (x * tl.rsqrt(var + eps)[:, None]).to(o_ptr.dtype.element_ty)
        w = tl.load(w_ptr + d, mask=d < DIM, other=0.0)
        h = (w.to(tl.float32)[None, :] * h.to(tl.float32)).to(o_ptr.dtype.element_ty)
        token, head = r // heads, r % heads
        g = tl.load(g_ptr + (token * stride_gt + head * DIM)[:, None] + d[None, :], mask=ok, other=0.0)
        g = g.to(tl.float32)
        out = h.to(tl.float32) * (g / (1.0 + tl.exp(-g)))
        tl.store(o_ptr + r[:, None] * DIM + d[None, :], out.to(o_ptr.dtype.element_ty), mask=ok)

    _KERNELS.update(silu_mul=silu_mul_kernel, gated_norm=gated_norm_kernel)


def _kernel(name: str) -> Any:
    if not _KERNELS:
        _build()
    return _KERNELS[name]


def silu_mul(gate: Any, up: Any, rounded: bool = True) -> Any:
    """silu(gate) * up, with the library's roundings or (rounded=False) in FP32 with one rounding: one
    Triton kernel where it can run, else the reference."""
    if not use_triton(gate) or gate.shape != up.shape or gate.dtype != up.dtype:
        return silu_mul_reference(gate, up, rounded)
    import torch
    import triton

    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    if n:
        _kernel("silu_mul")[(triton.cdiv(n, SILU_BLOCK),)](gate, up, out, n, ROUNDED=rounded,
                                                            BLOCK=SILU_BLOCK, num_warps=8)
    return out


def gated_rms_norm(x: Any, gate: Any, weight: Any, eps: float) -> Any:
    """Gated RMSNorm of x [rows, dim] with gate [tokens, heads * dim] (rows = tokens * heads, any token
    stride, unit stride inside a token) or gate shaped like x; out [rows, dim] in x's dtype."""
    rows, dim = x.shape
    token_layout = gate.dim() == 2 and gate.shape[0] * gate.shape[1] == rows * dim and gate.shape[1] % dim == 0
    if not (token_layout and gate.stride(1) == 1 and weight.numel() == dim and use_triton(x)):
        return gated_rms_norm_reference(x, gate, weight, eps)
    import torch
    import triton

    x = x.contiguous()
    out = torch.empty_like(x)
    heads = gate.shape[1] // dim
    if rows:
        block = triton.next_power_of_2(dim)
        _kernel("gated_norm")[(triton.cdiv(rows, NORM_ROWS),)](x, gate, weight.contiguous(), out, rows, heads,
                                                             gate.stride(0), float(eps), DIM=dim, BD=block,
                                                             BR=NORM_ROWS, num_warps=4)
    return out


def silu_mul_fp32(gate: Any, up: Any) -> Any:
    """`silu_mul(gate, up, rounded=False)`: Inductor's arithmetic for silu(gate) * up (`--fuse silu-mul-fp32`)."""
    return silu_mul(gate, up, rounded=False)

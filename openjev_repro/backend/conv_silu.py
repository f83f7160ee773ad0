"""The Gated DeltaNet's depthwise causal convolution and its SiLU as one Triton kernel (`--fuse conv-silu`).

The library runs `F.conv1d` on the projection transposed to [batch, channels, time] (a copy), keeps the
first `time` outputs, applies SiLU (a second pass), and transposes back for the split into q, k and v
(further copies). Here one kernel reads the projection in its own [batch, time, channels] layout (any
row stride, so a column slice of a wider projection is read in place), computes for every channel c
and time t

    y[t, c] = silu(round(sum_k w[c, k] * x[t - (K - 1) + k, c]))     (x = 0 before the first token)

with the sum accumulated in FP32 in the order k = 0 .. K-1 and rounded to the output dtype once, then
SiLU computed in FP32 on that rounded value and rounded again: the rounding points of the library's
`conv1d` + `silu` pair. The result is written contiguous [batch, time, channels]. Whether a GPU's
cuDNN sums the four products in the same order is not documented, so on CUDA the outputs may differ
from the library's in the last bit; in FP32 on the CPU the reference below is the same function.

The kernel has fixed block sizes (no autotuning): the same input gives the same bits in every process.
`conv_silu` runs it on CUDA tensors, and on CPU tensors when Triton's interpreter is on
(`TRITON_INTERPRET=1`, how the tests check it without a GPU); otherwise on CPU it runs
`conv_silu_reference`, the same arithmetic in PyTorch.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["BLOCK_C", "BLOCK_T", "conv_silu", "conv_silu_reference", "triton_available"]

BLOCK_T = 16
BLOCK_C = 256
_KERNEL: Any = None


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def conv_silu_reference(x: Any, weight: Any, bias: Any = None, activation: bool = True) -> Any:
    """The library's arithmetic on [batch, time, channels]: conv1d (left zero padding K-1), SiLU, same dtype."""
    import torch

    channels, k = weight.shape
    out = torch.nn.functional.conv1d(x.transpose(1, 2).to(weight.dtype), weight.unsqueeze(1), bias,
                                     padding=k - 1, groups=channels)[:, :, : x.shape[1]]
    if activation:
        out = torch.nn.functional.silu(out)
    return out.to(x.dtype).transpose(1, 2).contiguous()


def _build_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def conv_silu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, T, C, stride_xb, stride_xt, stride_yb, stride_yt,
                         K: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                         BT: tl.constexpr, BC: tl.constexpr):
        pid_t, pid_c, pid_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        t = pid_t * BT + tl.arange(0, BT)
        c = pid_c * BC + tl.arange(0, BC)
        c_ok = c < C
        acc = tl.zeros((BT, BC), dtype=tl.float32)
        for k in tl.static_range(K):
            src = t - (K - 1) + k
            ok = ((src >= 0) & (src < T))[:, None] & c_ok[None, :]
            xv = tl.load(x_ptr + pid_b * stride_xb + src[:, None] * stride_xt + c[None, :], mask=ok, other=0.0)
            wv = tl.load(w_ptr + c * K + k, mask=c_ok, other=0.0)
            acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
        if HAS_BIAS:
            acc += tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        out = acc.to(y_ptr.dtype.element_ty)
        if SILU:
            o = out.to(tl.float32)
            out = (o / (1.0 + tl.exp(-o))).to(y_ptr.dtype.element_ty)
        ok = (t < T)[:, None] & c_ok[None, :]
        tl.store(y_ptr + pid_b * stride_yb + t[:, None] * stride_yt + c[None, :], out, mask=ok)

    return conv_silu_kernel


def conv_silu_triton(x: Any, weight: Any, bias: Any = None, activation: bool = True) -> Any:
    """The Triton kernel on x [batch, time, channels] (unit channel stride), weight [channels, K]."""
    import torch
    import triton

    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    batch, time, channels = x.shape
    if x.stride(2) != 1:
        x = x.contiguous()
    weight = weight.contiguous()
    y = torch.empty((batch, time, channels), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(time, BLOCK_T), triton.cdiv(channels, BLOCK_C), batch)
    _KERNEL[grid](x, weight, bias if bias is not None else weight, y, time, channels, x.stride(0), x.stride(1),
                  y.stride(0), y.stride(1), K=weight.shape[1], HAS_BIAS=bias is not None, SILU=activation,
                  BT=BLOCK_T, BC=BLOCK_C)
    return y


def conv_silu(x: Any, weight: Any, bias: Any = None, activation: bool = True) -> Any:
    """Causal depthwise conv (+ SiLU) on [batch, time, channels]; Triton where it can run, else the reference."""
    if x.is_cuda or (os.environ.get("TRITON_INTERPRET") == "1" and triton_available()):
        return conv_silu_triton(x, weight, bias, activation)
    return conv_silu_reference(x, weight, bias, activation)

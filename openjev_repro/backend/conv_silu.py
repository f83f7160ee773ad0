"""The Gated DeltaNet's depthwise causal convolution and its SiLU as one Triton kernel (`--fuse conv-silu`).

The library runs `F.conv1d` on the projection transposed to [batch, channels, time] (a copy), keeps the
first `time` outputs, applies SiLU (a second pass), and transposes back for the split into q, k and v
(further copies). Here one kernel reads the projection in its own [batch, time, channels] layout (any
row stride, so a column slice of a wider projection is read in place), computes for every channel c
and time t

    y[t, c] = silu(round(sum_k w[c, k] * x[t - (K - 1) + k, c]))     (x = 0 before the first token)

with the sum accumulated in FP32 in the order k = 0 .. K-1 and rounded to the output dtype once, then
SiLU computed in FP32 on that rounded value and rounded again: the rounding points of the library's
`conv1d` + `silu` pair. The result is written contiguous [batch, time, channels], or, with `splits`
(the Gated DeltaNet's q, k and v widths), as one contiguous [batch, time, width] tensor per part: the
split views of one [batch, time, channels] tensor are strided, and FLA's delta rule copied each of them
to contiguous (144 copies a 27B forward, about 3.3 ms at 2312 tokens: profile-2026-12-02). The values
are the same either way; only where they are stored differs. Whether a GPU's
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

__all__ = ["BLOCK_C", "BLOCK_T", "conv_silu", "conv_silu_reference", "split_block", "use_triton"]

BLOCK_T = 16
BLOCK_C = 256
_KERNEL: Any = None


def use_triton(t: Any) -> bool:
    """Whether a kernel of this module or gate_kernels.py runs on tensor `t`: on CUDA, and on CPU under
    Triton's interpreter (TRITON_INTERPRET=1, where triton imports); else the references run."""
    if t.is_cuda:
        return True
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def conv_silu_reference(x: Any, weight: Any, bias: Any = None, activation: bool = True,
                        splits: tuple[int, ...] | None = None) -> Any:
    """The library's arithmetic on [batch, time, channels]: conv1d (left zero padding K-1), SiLU, same dtype;
    with `splits`, a tuple of contiguous [batch, time, width] parts."""
    import torch

    channels, k = weight.shape
    out = torch.nn.functional.conv1d(x.transpose(1, 2).to(weight.dtype), weight.unsqueeze(1), bias,
                                     padding=k - 1, groups=channels)[:, :, : x.shape[1]]
    if activation:
        out = torch.nn.functional.silu(out)
    out = out.to(x.dtype).transpose(1, 2).contiguous()
    return out if splits is None else _split_contiguous(out, splits)


def _split_contiguous(y: Any, splits: tuple[int, ...]) -> tuple[Any, ...]:
    import torch

    return tuple(part.contiguous() for part in torch.split(y, list(splits), dim=-1))


def split_block(splits: tuple[int, ...]) -> int | None:
    """The channel block (a power of two, 16 to BLOCK_C) that divides the first two split widths, so that
    every block of channels lies in one part; None where there is none (the caller splits afterwards)."""
    if len(splits) != 3:
        return None
    block = BLOCK_C
    while block >= 16:
        if splits[0] % block == 0 and splits[1] % block == 0:
            return block
        block //= 2
    return None


def _build_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def conv_silu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, T, C, stride_xb, stride_xt, stride_yb, stride_yt, S1, S2,
                         K: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr, SPLIT: tl.constexpr,
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
        if SPLIT:   # parts [B, T, S1], [B, T, S2], [B, T, C - S1 - S2] one after another; a block lies in one part
            first = pid_c * BC
            in_a, in_b = first < S1, (first >= S1) & (first < S1 + S2)
            start = tl.where(in_a, 0, tl.where(in_b, S1, S1 + S2))
            width = tl.where(in_a, S1, tl.where(in_b, S2, C - S1 - S2))
            base = tl.where(in_a, 0, tl.where(in_b, S1, S1 + S2)) * T * tl.num_programs(2)
            tl.store(y_ptr + base + pid_b * T * width + t[:, None] * width + (c - start)[None, :], out, mask=ok)
        else:
            tl.store(y_ptr + pid_b * stride_yb + t[:, None] * stride_yt + c[None, :], out, mask=ok)

    return conv_silu_kernel


def conv_silu_triton(x: Any, weight: Any, bias: Any = None, activation: bool = True,
                     splits: tuple[int, ...] | None = None) -> Any:
    """The Triton kernel on x [batch, time, channels] (unit channel stride), weight [channels, K]; with
    `splits` (three widths), the parts as contiguous tensors, written in place by the kernel where a
    channel block divides the widths (`split_block`), else split and copied afterwards."""
    import torch
    import triton

    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    batch, time, channels = x.shape
    if x.stride(2) != 1:
        x = x.contiguous()
    weight = weight.contiguous()
    block = split_block(splits) if splits is not None and sum(splits) == channels else None
    y = torch.empty((batch, time, channels), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(time, BLOCK_T), triton.cdiv(channels, block or BLOCK_C), batch)
    first, second = (splits[0], splits[1]) if block and splits else (0, 0)
    _KERNEL[grid](x, weight, bias if bias is not None else weight, y, time, channels, x.stride(0), x.stride(1),
                  y.stride(0), y.stride(1), first, second, K=weight.shape[1], HAS_BIAS=bias is not None,
                  SILU=activation, SPLIT=block is not None, BT=BLOCK_T, BC=block or BLOCK_C)
    if splits is None:
        return y
    if block is None:
        return _split_contiguous(y, splits)
    flat, parts, offset = y.view(-1), [], 0
    for width in splits:
        parts.append(flat[offset: offset + batch * time * width].view(batch, time, width))
        offset += batch * time * width
    return tuple(parts)


def conv_silu(x: Any, weight: Any, bias: Any = None, activation: bool = True,
              splits: tuple[int, ...] | None = None) -> Any:
    """Causal depthwise conv (+ SiLU) on [batch, time, channels]; Triton where it can run, else the reference.
    With `splits`, a tuple of contiguous [batch, time, width] parts (q, k, v) instead of one tensor."""
    if use_triton(x):
        return conv_silu_triton(x, weight, bias, activation, splits)
    return conv_silu_reference(x, weight, bias, activation, splits)

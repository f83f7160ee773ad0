#!/usr/bin/env python3
"""Fast mode's fused kernels on the GPU: correct against the library first, then timed (H200 diagnostic).

    conv         the Triton causal conv + SiLU (backend/conv_silu.py) against the library's path
                 (transpose, F.conv1d, SiLU, transpose back, split-ready copy) at the 27B shape's
                 10,240 channels: bits that differ, relative error to an FP64 reference, time of each
    gemm         the linear-attention input projections and the MLP's gate/up, four and two GEMMs
                 against one concatenated GEMM each, at 96, 300 and 2312 rows: time and weight TB/s
    gated-norm   the library's Qwen3_5RMSNormGated against fast_layers.gated_rms_norm under
                 torch.compile (--fuse gated-norm with --compile), 48 value heads x 128 at 100 and
                 2312 tokens: bits that differ, relative error to FP64, time of each
    grouped-qk   FLA's chunk_gated_delta_rule with q/k repeated to 48 heads (repeat_interleave
                 timed with it) against the 16 grouped heads (--fuse grouped-qk): bits, time
    gemm-choice  every GEMM shape of one fast-mode forward (with its calls per forward) at short
                 lengths, four ways: F.linear on the [out, in] weight (what runs today) and x @ W^T
                 on a [in, out] copy, each under cuBLAS and cuBLASLt (preferred_blas_library), plus
                 Inductor's max-autotune GEMM at 100 rows: time, weight TB/s, bits against today's
    silu-mul     the MLP's silu(gate) * up as fast mode compiles it (dynamic lengths) against eager
                 and a static-shape compile, at 100 and 2312 tokens: time and TB/s (read + written)
    gates        backend/gate_kernels.py on the GPU (--fuse silu-mul, silu-mul-fp32, triton-gated-norm) against the
                 library's eager arithmetic and the compiled functions they replace, at 1, 100, 2312
                 and 3399 tokens (the gated norm's z a column slice of the projection, read in place):
                 bits that differ, time of each in a CUDA Graph

Usage (repo on PYTHONPATH): python3 scripts/h200-kernel-check.py --out $OUT/kernel-check.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def conv_checks(torch) -> list[dict]:
    from openjev_repro.backend.conv_silu import conv_silu_reference, conv_silu_triton
    from openjev_repro.backend.hardware import median_event_ms

    out = []
    channels, wide = 10240, 16480
    for seed, t in enumerate((1, 96, 100, 2312, 3399)):
        g = torch.Generator(device="cuda").manual_seed(seed)
        proj = torch.randn(1, t, wide, device="cuda", generator=g).bfloat16()
        x = proj[:, :, :channels]
        w = (torch.randn(channels, 4, device="cuda", generator=g) * 0.5).bfloat16()
        lib = conv_silu_reference(x, w)
        got = conv_silu_triton(x, w)
        ref = conv_silu_reference(x.double(), w.double())
        row = {"tokens": t, "differing_fraction": float((got != lib).float().mean()),
               "max_abs_diff": float((got.float() - lib.float()).abs().max()),
               "rel_err_fused": float((got.double() - ref).norm() / ref.norm()),
               "rel_err_library": float((lib.double() - ref).norm() / ref.norm()),
               "repeat_bit_identical": bool(torch.equal(got, conv_silu_triton(x, w)))}
        row["library_ms"] = median_event_ms(torch, lambda x=x, w=w: conv_silu_reference(x, w), 3, 20)
        row["fused_ms"] = median_event_ms(torch, lambda x=x, w=w: conv_silu_triton(x, w), 3, 20)
        row["fused_tbps"] = 2 * 2 * t * channels / (row["fused_ms"] / 1e3) / 1e12
        out.append(row)
        print("conv", json.dumps(row), flush=True)
    return out


def gemm_checks(torch) -> list[dict]:
    from openjev_repro.backend.hardware import median_event_ms

    f = torch.nn.functional.linear
    out = []
    shapes = {"linear-attention in (qkv, z, b, a)": (5120, [10240, 6144, 48, 48]),
              "MLP gate/up": (5120, [17408, 17408])}
    for name, (k, ns) in shapes.items():
        ws = [torch.randn(n, k, device="cuda").bfloat16() for n in ns]
        cat = torch.cat(ws, 0)
        for m in (96, 300, 2312):
            x = torch.randn(1, m, k, device="cuda").bfloat16()
            sep = median_event_ms(torch, lambda x=x, ws=ws: [f(x, w) for w in ws], 3, 30)
            one = median_event_ms(torch, lambda x=x, cat=cat: f(x, cat), 3, 30)
            split = torch.cat([f(x, w) for w in ws], -1)
            row = {"gemm": name, "rows": m, "separate_ms": sep, "concatenated_ms": one,
                   "weight_tbps_separate": cat.numel() * 2 / (sep / 1e3) / 1e12,
                   "weight_tbps_concatenated": cat.numel() * 2 / (one / 1e3) / 1e12,
                   "bit_identical": bool(torch.equal(split, f(x, cat)))}
            out.append(row)
            print("gemm", json.dumps(row), flush=True)
    return out


# (in, out, calls per forward) of fast mode with concat-in-proj at the 27B text shape
FORWARD_GEMMS = {"mlp gate / up": (5120, 17408, 128), "mlp down": (17408, 5120, 64),
                 "linear-attention in (concat)": (5120, 16480, 48), "attention / linear-attention out": (6144, 5120, 64),
                 "attention q (+gate)": (5120, 12288, 16), "attention k / v": (5120, 1024, 32)}


def graph_ms(torch, fn, repeat: int = 20, replays: int = 15) -> float:
    """GPU time of one `fn()` in ms, as the backend runs it: `repeat` calls captured in one CUDA Graph,
    the median of `replays` timed replays divided by `repeat` (no launch gaps, no Python in the time)."""
    from openjev_repro.backend.hardware import median_event_ms

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            fn()
    ms = median_event_ms(torch, graph.replay, 3, replays) / repeat
    del graph
    return ms


def gemm_choice_checks(torch) -> list[dict]:
    f = torch.nn.functional.linear
    library = torch.backends.cuda.preferred_blas_library()
    out = []
    for name, (k, n, calls) in FORWARD_GEMMS.items():
        w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
        wt = w.t().contiguous()
        for m in (64, 100, 185, 300, 936):
            x = torch.randn(1, m, k, device="cuda").bfloat16()
            row = {"gemm": name, "rows": m, "in": k, "out": n, "calls_per_forward": calls}
            ref = f(x, w)
            for blas in ("cublas", "cublaslt"):
                torch.backends.cuda.preferred_blas_library(blas)
                for layout, fn in (("linear", lambda x=x, w=w: f(x, w)), ("nn", lambda x=x, wt=wt: x @ wt)):
                    ms = graph_ms(torch, fn)
                    row[f"{layout}_{blas}_ms"] = ms
                    row[f"{layout}_{blas}_weight_tbps"] = w.numel() * 2 / (ms / 1e3) / 1e12
                    row[f"{layout}_{blas}_bit_identical"] = bool(torch.equal(fn(), ref))
            torch.backends.cuda.preferred_blas_library(library)
            if m == 100:
                try:
                    tuned = torch.compile(lambda x, w: f(x, w), mode="max-autotune-no-cudagraphs", dynamic=False)
                    tuned(x, w)
                    ms = graph_ms(torch, lambda x=x, w=w, tuned=tuned: tuned(x, w))
                    row["inductor_max_autotune_ms"] = ms
                    row["inductor_max_autotune_weight_tbps"] = w.numel() * 2 / (ms / 1e3) / 1e12
                    row["inductor_max_autotune_bit_identical"] = bool(torch.equal(tuned(x, w), ref))
                except Exception as exc:  # noqa: BLE001 - a diagnostic: record why and go on
                    row["inductor_max_autotune_error"] = f"{type(exc).__name__}: {exc}"[:300]
            out.append(row)
            print("gemm-choice", json.dumps(row), flush=True)
        del w, wt
    torch.backends.cuda.preferred_blas_library(library)
    return out


def _triton_silu_mul(torch):
    """A plain Triton silu(gate) * up with eager's BF16 rounding of silu(gate): what a hand kernel reaches."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(g_ptr, u_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
        s = (g / (1.0 + tl.exp(-g))).to(tl.bfloat16).to(tl.float32)
        tl.store(o_ptr + offs, (s * u).to(tl.bfloat16), mask=mask)

    def run(gate, up):
        out = torch.empty_like(gate)
        n = gate.numel()
        kernel[(triton.cdiv(n, 4096),)](gate, up, out, n, BLOCK=4096, num_warps=8)
        return out
    return run


def silu_mul_checks(torch) -> list[dict]:
    from openjev_repro.backend.fusion import compile_function, silu_mul

    triton_silu_mul = _triton_silu_mul(torch)
    dynamic = compile_function(silu_mul)
    out = []
    for t in (100, 2312):
        g = torch.Generator(device="cuda").manual_seed(t)
        gate = torch.randn(1, t, 17408, device="cuda", generator=g).bfloat16()
        up = torch.randn(1, t, 17408, device="cuda", generator=g).bfloat16()
        static = torch.compile(silu_mul, dynamic=False)
        row = {"tokens": t, "bytes": gate.numel() * 2 * 3}
        ref = silu_mul(gate, up)
        for label, fn in (("eager", silu_mul), ("compiled_dynamic", dynamic), ("compiled_static", static),
                          ("triton_bf16_rounded", triton_silu_mul)):
            ms = graph_ms(torch, lambda fn=fn, gate=gate, up=up: fn(gate, up))
            row[f"{label}_ms"] = ms
            row[f"{label}_tbps"] = row["bytes"] / (ms / 1e3) / 1e12
            row[f"{label}_bit_identical_to_eager"] = bool(torch.equal(fn(gate, up), ref))
        out.append(row)
        print("silu-mul", json.dumps(row), flush=True)
    return out


def gates_checks(torch) -> list[dict]:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from openjev_repro.backend import gate_kernels
    from openjev_repro.backend.fast_layers import gated_rms_norm
    from openjev_repro.backend.fusion import compile_function, silu_mul

    compiled_mul, compiled_norm = compile_function(silu_mul), compile_function(gated_rms_norm)
    out = []
    heads, dim = 48, 128
    for t in (1, 100, 2312, 3399):
        g = torch.Generator(device="cuda").manual_seed(7 + t)
        gate = (torch.randn(1, t, 17408, device="cuda", generator=g) * 2).bfloat16()
        up = torch.randn(1, t, 17408, device="cuda", generator=g).bfloat16()
        eager = silu_mul(gate, up)
        kernel = gate_kernels.silu_mul(gate, up)
        row = {"tokens": t, "silu_mul_bits_differ": int((kernel != eager).sum()), "silu_mul_elements": eager.numel(),
               "silu_mul_compiled_bits_differ": int((compiled_mul(gate, up) != eager).sum()),
               "silu_mul_fp32_bits_differ_from_compiled": int((gate_kernels.silu_mul_fp32(gate, up)
                                                               != compiled_mul(gate, up)).sum()),
               "silu_mul_kernel_ms": graph_ms(torch, lambda gate=gate, up=up: gate_kernels.silu_mul(gate, up)),
               "silu_mul_compiled_ms": graph_ms(torch, lambda gate=gate, up=up: compiled_mul(gate, up))}
        x = torch.randn(t * heads, dim, device="cuda", generator=g).bfloat16()
        proj = torch.randn(t, 16480, device="cuda", generator=g).bfloat16()
        z = proj[:, 10240:10240 + heads * dim]
        norm = qwen.Qwen3_5RMSNormGated(dim, eps=1e-6).to("cuda", torch.bfloat16).requires_grad_(False)
        with torch.no_grad():
            norm.weight.copy_((1 + 0.2 * torch.randn(dim, device="cuda", generator=g)).bfloat16())
        library = norm(x, z.reshape(-1, dim))
        kernel = gate_kernels.gated_rms_norm(x, z, norm.weight, 1e-6)
        row.update({"gated_norm_bits_differ": int((kernel != library).sum()), "gated_norm_elements": library.numel(),
                    "gated_norm_max_abs_diff": float((kernel.float() - library.float()).abs().max()),
                    "gated_norm_compiled_bits_differ": int((compiled_norm(x, z.reshape(-1, dim), norm.weight, 1e-6)
                                                            != library).sum()),
                    "gated_norm_kernel_ms": graph_ms(torch, lambda x=x, z=z, w=norm.weight:
                                                     gate_kernels.gated_rms_norm(x, z, w, 1e-6)),
                    "gated_norm_compiled_with_z_copy_ms": graph_ms(torch, lambda x=x, z=z, w=norm.weight:
                                                                   compiled_norm(x, z.reshape(-1, dim), w, 1e-6))})
        out.append(row)
        print("gates", json.dumps(row), flush=True)
    return out


def gated_norm_checks(torch) -> list[dict]:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from openjev_repro.backend.fast_layers import gated_rms_norm
    from openjev_repro.backend.hardware import median_event_ms

    fused = torch.compile(gated_rms_norm, dynamic=True)
    out = []
    for seed, t in enumerate((100, 2312)):
        g = torch.Generator(device="cuda").manual_seed(50 + seed)
        norm = qwen.Qwen3_5RMSNormGated(128, eps=1e-6).to("cuda", torch.bfloat16)
        with torch.no_grad():
            norm.weight.copy_(torch.randn(128, device="cuda", generator=g))
        x, z = (torch.randn(t * 48, 128, device="cuda", generator=g).bfloat16() for _ in range(2))
        with torch.inference_mode():
            lib, got = norm(x, z), fused(x, z, norm.weight, 1e-6)
            ref = gated_rms_norm(x.double(), z.double(), norm.weight.double(), 1e-6)
            row = {"tokens": t, "rows": t * 48, "differing_fraction": float((got != lib).float().mean()),
                   "max_abs_diff": float((got.float() - lib.float()).abs().max()),
                   "rel_err_fused": float((got.double() - ref).norm() / ref.norm()),
                   "rel_err_library": float((lib.double() - ref).norm() / ref.norm()),
                   "repeat_bit_identical": bool(torch.equal(got, fused(x, z, norm.weight, 1e-6))),
                   "library_ms": median_event_ms(torch, lambda x=x, z=z, n=norm: n(x, z), 3, 20),
                   "fused_ms": median_event_ms(torch, lambda x=x, z=z, n=norm: fused(x, z, n.weight, 1e-6), 3, 20)}
        row["fused_tbps"] = 3 * 2 * x.numel() / (row["fused_ms"] / 1e3) / 1e12
        out.append(row)
        print("gated-norm", json.dumps(row), flush=True)
    return out


def grouped_qk_checks(torch) -> list[dict]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    from openjev_repro.backend.hardware import median_event_ms

    out = []
    for seed, t in enumerate((100, 2312)):
        g = torch.Generator(device="cuda").manual_seed(60 + seed)
        q, k = (torch.randn(1, t, 16, 128, device="cuda", generator=g).bfloat16() for _ in range(2))
        v = torch.randn(1, t, 48, 128, device="cuda", generator=g).bfloat16()
        beta = torch.rand(1, t, 48, device="cuda", generator=g).bfloat16()
        decay = -torch.rand(1, t, 48, device="cuda", generator=g) * 0.5

        def repeated(q=q, k=k, v=v, beta=beta, decay=decay):
            return chunk_gated_delta_rule(q.repeat_interleave(3, dim=2), k.repeat_interleave(3, dim=2), v, g=decay,
                                          beta=beta, use_qk_l2norm_in_kernel=True)[0]

        def grouped(q=q, k=k, v=v, beta=beta, decay=decay):
            return chunk_gated_delta_rule(q, k, v, g=decay, beta=beta, use_qk_l2norm_in_kernel=True)[0]

        with torch.inference_mode():
            a, b = repeated(), grouped()
            row = {"tokens": t, "differing_fraction": float((a != b).float().mean()),
                   "max_abs_diff": float((a.float() - b.float()).abs().max()),
                   "rel_diff": float((a.double() - b.double()).norm() / a.double().norm()),
                   "grouped_repeat_bit_identical": bool(torch.equal(b, grouped())),
                   "repeated_ms": median_event_ms(torch, repeated, 3, 20),
                   "grouped_ms": median_event_ms(torch, grouped, 3, 20)}
        out.append(row)
        print("grouped-qk", json.dumps(row), flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checks", default="conv,gemm,gated-norm,grouped-qk", help="comma list of the checks to run")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    import torch

    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    checks = {"conv": conv_checks, "gemm": gemm_checks, "gated-norm": gated_norm_checks,
              "grouped-qk": grouped_qk_checks, "gemm-choice": gemm_choice_checks, "silu-mul": silu_mul_checks,
              "gates": gates_checks}
    for name in args.checks.split(","):
        result[name] = checks[name](torch)
        args.out.write_text(json.dumps(result, indent=1) + "\n")   # after every check, so a cut-short run keeps it
    return 0


if __name__ == "__main__":
    sys.exit(main())

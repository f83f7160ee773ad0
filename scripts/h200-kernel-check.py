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
              "grouped-qk": grouped_qk_checks}
    for name in args.checks.split(","):
        result[name] = checks[name](torch)
        args.out.write_text(json.dumps(result, indent=1) + "\n")   # after every check, so a cut-short run keeps it
    return 0


if __name__ == "__main__":
    sys.exit(main())

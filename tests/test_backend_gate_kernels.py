"""The Triton gates (`backend/gate_kernels.py`: `--fuse silu-mul`, `silu-mul-fp32`, `triton-gated-norm`) on CPU.

The kernels run under Triton's interpreter in a subprocess (TRITON_INTERPRET=1; triton from
OPENJEV_TRITON_PATH, installed by .ci/run). The interpreter rounds FP32 -> BF16 toward zero where the
GPU rounds to nearest even, so BF16 results are compared with the kernel's arithmetic emulated in
torch with that rounding; FP32 results with the library's arithmetic. On the GPU the kernels were
compared with the library's eager BF16 arithmetic bit for bit (scripts/h200-kernel-check.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from triton_interpreter import interpreter_env

from openjev_repro.backend import gate_kernels
from openjev_repro.backend.fast_layers import gated_rms_norm

_KERNELS = r"""
import json, torch
from openjev_repro.backend import gate_kernels as gk

def truncate(t):   # the interpreter's FP32 -> BF16 rounding (toward zero)
    return (t.float().contiguous().view(torch.int32) & -65536).view(torch.float32).bfloat16()

def rounder(dtype):
    return truncate if dtype == torch.bfloat16 else (lambda v: v)

def silu(v):
    return v / (1.0 + torch.exp(-v))

def emulated_silu_mul(g, u, rounded=True):
    rnd = rounder(g.dtype)
    if not rounded:
        v = g.float()
        return rnd(v * torch.sigmoid(v) * u.float())
    return rnd(rnd(silu(g.float())).float() * u.float())

def emulated_norm(x, gate, w, eps):
    rnd = rounder(x.dtype)
    h = x.float()
    h = rnd(h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).float()
    h = rnd(w.float() * h).float()
    return rnd(h * silu(gate.reshape(x.shape).float()))

def compare(got, same, ref):
    return {"dtype": str(got.dtype), "shape": list(got.shape),
            "mismatch_vs_emulated": float((got != same).float().mean()),
            "max_rel_vs_emulated": float(((got.double() - same.double()).abs() / same.double().abs().clamp_min(1e-30)).max()),
            "rel_vs_library": float((got.double() - ref.double()).norm() / ref.double().norm()),
            "nan": bool(torch.isnan(got).any())}

out = {"silu_mul": [], "silu_mul_fp32": [], "norm": []}
for seed, (shape, dtype) in enumerate([((1, 7, 300), "float32"), ((1, 37, 5000), "bfloat16"), ((3, 5), "float32"),
                                       ((1, 1, 4097), "bfloat16")]):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    gate, up = (torch.randn(shape, generator=g) * 3).to(dt), torch.randn(shape, generator=g).to(dt)
    got = gk.silu_mul(gate, up)
    assert got.shape == gate.shape and got.dtype == dt and got.is_contiguous()
    ref = gk.silu_mul_reference(gate.float(), up.float())
    out["silu_mul"].append(compare(got, emulated_silu_mul(gate, up), ref))
    unrounded = gk.silu_mul_fp32(gate, up)
    out["silu_mul_fp32"].append(compare(unrounded, emulated_silu_mul(gate, up, rounded=False), ref))
    out["silu_mul_fp32"][-1]["differs_from_rounded"] = bool((unrounded != got).any())
for seed, (tokens, heads, dim, dtype, in_place) in enumerate([(37, 6, 128, "float32", True), (5, 3, 128, "bfloat16", True),
                                                              (19, 4, 64, "float32", False), (1, 2, 48, "bfloat16", True)]):
    g = torch.Generator().manual_seed(50 + seed)
    dt = getattr(torch, dtype)
    x = torch.randn(tokens * heads, dim, generator=g).to(dt)
    w = (1 + 0.3 * torch.randn(dim, generator=g)).to(dt)
    proj = torch.randn(tokens, heads * dim + 77, generator=g).to(dt)
    gate = proj[:, 13:13 + heads * dim] if in_place else proj[:, :heads * dim].reshape(tokens * heads, dim).contiguous()
    got = gk.gated_rms_norm(x, gate, w, 1e-6)
    assert got.shape == x.shape and got.dtype == dt
    ref = gk.gated_rms_norm_reference(x.float(), gate.float(), w.float(), 1e-6)
    case = compare(got, emulated_norm(x, gate, w, 1e-6), ref)
    case["in_place"] = in_place and gate.stride(0) == heads * dim + 77
    out["norm"].append(case)
print(json.dumps(out))
"""


def _check(case: dict) -> None:
    assert not case["nan"], case
    if case["dtype"] == "torch.bfloat16":   # rare roundings that an exp one FP32 ulp apart flips
        assert case["mismatch_vs_emulated"] <= 2e-3, case
        assert case["rel_vs_library"] < 2e-2, case
    else:
        assert case["max_rel_vs_emulated"] <= 1e-5, case
        assert case["rel_vs_library"] < 1e-6, case


def test_triton_gates_match_the_library_arithmetic_under_the_interpreter() -> None:
    done = subprocess.run([sys.executable, "-c", _KERNELS], capture_output=True, text=True, env=interpreter_env(),
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(cases["silu_mul"]) == len(cases["silu_mul_fp32"]) == len(cases["norm"]) == 4
    for case in cases["silu_mul"] + cases["silu_mul_fp32"] + cases["norm"]:
        _check(case)
    # in BF16 the two roundings give other bits (the fp32 variant keeps Inductor's single rounding)
    assert [c["differs_from_rounded"] for c in cases["silu_mul_fp32"] if c["dtype"] == "torch.bfloat16"] == [True, True]
    assert [c["in_place"] for c in cases["norm"]] == [True, True, False, True]   # z read through its token stride


def test_without_triton_the_gates_are_the_library_arithmetic_bit_for_bit() -> None:
    g = torch.Generator().manual_seed(3)
    gate, up = torch.randn(1, 9, 40, generator=g).bfloat16(), torch.randn(1, 9, 40, generator=g).bfloat16()
    assert torch.equal(gate_kernels.silu_mul(gate, up), torch.nn.functional.silu(gate) * up)
    g32 = gate.float()
    assert torch.equal(gate_kernels.silu_mul_fp32(gate, up), (g32 * torch.sigmoid(g32) * up.float()).bfloat16())
    x, w = torch.randn(12, 16, generator=g).bfloat16(), torch.randn(16, generator=g).bfloat16()
    z = torch.randn(3, 4 * 16 + 5, generator=g).bfloat16()[:, 5:]
    expect = gated_rms_norm(x, z.reshape(12, 16), w, 1e-6)
    assert torch.equal(gate_kernels.gated_rms_norm(x, z, w, 1e-6), expect)
    assert torch.equal(gate_kernels.gated_rms_norm(x, z.reshape(12, 16), w, 1e-6), expect)


_MODEL = r"""
import json, sys, torch
from openjev_repro.backend.model import DecisionModel, Settings
from openjev_repro.backend.package import read_package
package = read_package(sys.argv[1])
ids = torch.randint(0, 1000, (1, 41), generator=torch.Generator().manual_seed(9))
def run(fusions):
    model = DecisionModel.from_package(package, Settings(mode="fast", device="cpu", fusions=fusions))
    with torch.inference_mode():
        return model.backbone(input_ids=ids, use_cache=False).last_hidden_state, model.info.fusions
plain, _ = run(())
fused, info = run(("concat-in-proj", "silu-mul", "triton-gated-norm"))
fp32, info32 = run(("silu-mul-fp32", "triton-gated-norm"))
print(json.dumps({"rel": float((plain - fused).norm() / plain.norm()), "fusions": info,
                  "rel_fp32": float((plain - fp32).norm() / plain.norm()), "fusions_fp32": info32}))
"""


def test_fixture_model_with_the_triton_gates_scores_like_the_library(fixture_checkpoint: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _MODEL, str(fixture_checkpoint)], capture_output=True, text=True,
                          env=interpreter_env(), timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "silu-mul" in result["fusions"] and "gated norms" in result["fusions"] and " MLPs" in result["fusions"], result
    assert result["rel"] < 1e-5 and result["rel_fp32"] < 1e-5, result
    assert "silu-mul-fp32" in result["fusions_fp32"] and " MLPs" in result["fusions_fp32"], result

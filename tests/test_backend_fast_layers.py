"""Fast mode's fusions (`--fuse`): the Triton conv + SiLU kernel and the patched layers compute what the library does.

The Triton kernel runs here under Triton's interpreter (`TRITON_INTERPRET=1`, set in a subprocess so
this process's Triton is untouched) on fresh random inputs: bit for bit against its own arithmetic
written in torch, and close to the library's `conv1d` + `silu` pair in FP64. The interpreter rounds
FP32 -> BF16 toward zero where the GPU rounds to nearest even (seen with Triton 3.6), so the BF16
emulation truncates too; the GPU check against the library is `scripts/h200-kernel-check.py`. Triton is not
in .venv (torch on CPU does not need it): the interpreter tests import it from OPENJEV_TRITON_PATH, where
.ci/run installs triton 3.6.0, and OPENJEV_REQUIRE_TRITON=1 (set by .ci/run) makes its absence a failure. The
patched fixture model with every fusion (eager) must score like the unpatched one: bit-identical for
add-norm alone (the same operations), within FP32 rounding for the concatenated GEMMs and the conv.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from triton_interpreter import interpreter_env

from openjev_repro.backend.conv_silu import conv_silu_reference
from openjev_repro.backend.fast_layers import ALL, FUSIONS, parse_fusions
from openjev_repro.backend.model import DecisionModel, Settings
from openjev_repro.backend.package import read_package
from openjev_repro.errors import BackendError

REPO = Path(__file__).resolve().parents[1]

_INTERPRETED = r"""
import json, sys, torch
from openjev_repro.backend.conv_silu import conv_silu, conv_silu_reference

def truncate(t):   # Triton's interpreter rounds FP32 -> BF16 toward zero (the GPU rounds to nearest even)
    return (t.float().contiguous().view(torch.int32) & -65536).view(torch.float32).bfloat16()

def emulated(x, w, b):   # the kernel's arithmetic in torch: FP32 sum over k = 0..K-1, round, SiLU in FP32, round
    t, k = x.shape[1], w.shape[1]
    pad = torch.cat([torch.zeros(1, k - 1, x.shape[2], dtype=x.dtype), x], dim=1).float()
    acc = torch.zeros(1, t, x.shape[2])
    for j in range(k):
        acc = acc + pad[:, j:j + t] * w[:, j].float()
    if b is not None:
        acc = acc + b.float()
    rnd = truncate if x.dtype == torch.bfloat16 else (lambda v: v)
    o = rnd(acc).float()
    return rnd(o / (1.0 + torch.exp(-o)))

out = []
for seed, (t, c, dtype, bias, strided) in enumerate([(1, 7, "float32", False, False), (37, 300, "float32", True, True),
                                                     (64, 513, "bfloat16", False, True), (5, 40, "bfloat16", True, False)]):
    g = torch.Generator().manual_seed(100 + seed)
    dt = getattr(torch, dtype)
    wide = torch.randn(1, t, c + (17 if strided else 0), generator=g).to(dt)
    x = wide[:, :, :c]                      # a column slice of a wider projection, read in place
    w = (torch.randn(c, 4, generator=g) * 0.5).to(dt)
    b = torch.randn(c, generator=g).to(dt) if bias else None
    ref = conv_silu_reference(x.float(), w.float(), None if b is None else b.float()).double()
    got = conv_silu(x, w, b)
    assert got.is_contiguous() and got.shape == (1, t, c) and got.dtype == dt
    same = emulated(x, w, b)
    out.append({"t": t, "c": c, "dtype": dtype, "rel": float((got.double() - ref).norm() / ref.norm()),
                "mismatch_vs_emulated": float((got != same).float().mean()),
                "max_rel_vs_emulated": float(((got.double() - same.double()).abs()
                                              / same.double().abs().clamp_min(1e-30)).max()),
                "nan": bool(torch.isnan(got).any())})
print(json.dumps(out))
"""


def test_triton_conv_silu_matches_the_reference_under_the_interpreter() -> None:
    env = interpreter_env()
    done = subprocess.run([sys.executable, "-c", _INTERPRETED], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(cases) == 4
    for case in cases:
        assert not case["nan"], case
        # the kernel's own arithmetic: in BF16 bit for bit but for rare roundings that an exp one FP32 ulp
        # apart flips; in FP32 within a few ulps (numpy's and torch's exp differ there)
        if case["dtype"] == "bfloat16":
            assert case["mismatch_vs_emulated"] <= 1e-3, case
        else:
            assert case["max_rel_vs_emulated"] <= 1e-6, case
        assert case["rel"] < (1e-6 if case["dtype"] == "float32" else 2e-2), case


_SPLIT = r"""
import json, sys, torch
from openjev_repro.backend.conv_silu import conv_silu, split_block
from openjev_repro.backend.model import DecisionModel, Settings
from openjev_repro.backend.package import read_package

out = []
for t, splits, dtype, bias in [(37, (64, 64, 128), "float32", True), (16, (256, 256, 512), "bfloat16", False),
                               (5, (24, 24, 40), "bfloat16", True), (1, (32, 32, 64), "float32", False)]:
    g = torch.Generator().manual_seed(t)
    c, dt = sum(splits), getattr(torch, dtype)
    x = torch.randn(1, t, c + 9, generator=g).to(dt)[:, :, :c]      # a slice of a wider projection
    w = (torch.randn(c, 4, generator=g) * 0.5).to(dt)
    b = torch.randn(c, generator=g).to(dt) if bias else None
    expect = torch.split(conv_silu(x, w, b), list(splits), dim=-1)
    parts = conv_silu(x, w, b, splits=splits)
    out.append({"splits": splits, "block": split_block(splits),
                "identical": all(torch.equal(p, e) for p, e in zip(parts, expect, strict=True)),
                "contiguous": all(p.is_contiguous() and p.shape == e.shape for p, e in zip(parts, expect, strict=True))})
package = read_package(sys.argv[1])
ids = torch.randint(0, 1000, (1, 57), generator=torch.Generator().manual_seed(5))
def hidden(fusions):
    model = DecisionModel.from_package(package, Settings(mode="fast", device="cpu", fusions=fusions))
    with torch.inference_mode():
        return model.backbone(input_ids=ids, use_cache=False).last_hidden_state
a, f = hidden(()), hidden(("conv-silu", "gated-norm"))
out.append({"model_rel": float((a - f).norm() / a.norm())})
print(json.dumps(out))
"""


def test_triton_conv_silu_writes_q_k_v_contiguous_with_the_same_values(fixture_checkpoint: Path) -> None:
    """With `splits` the kernel stores q, k and v as three contiguous tensors (a channel block that divides
    the widths) or splits afterwards: bit for bit the parts of the one-tensor output. The fixture model with
    conv-silu and gated-norm (kernel under the interpreter) scores like the library."""
    done = subprocess.run([sys.executable, "-c", _SPLIT, str(fixture_checkpoint)], capture_output=True, text=True,
                          env=interpreter_env(), timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    *cases, model = json.loads(done.stdout.strip().splitlines()[-1])
    assert [c["block"] for c in cases] == [64, 256, None, 32]      # the in-kernel split ran, and the fallback
    assert all(c["identical"] and c["contiguous"] for c in cases), cases
    assert model["model_rel"] < 1e-5, model


def test_reference_is_the_library_conv_and_silu() -> None:
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(1, 29, 24, generator=g), torch.randn(24, 4, generator=g)
    conv = torch.nn.Conv1d(24, 24, 4, groups=24, padding=3, bias=False)
    conv.weight.data = w.unsqueeze(1)
    expect = torch.nn.functional.silu(conv(x.transpose(1, 2))[:, :, :29]).transpose(1, 2)
    assert torch.equal(conv_silu_reference(x, w), expect.contiguous())
    first = conv_silu_reference(x, w)[0, 0]          # causal: token 0 sees only itself
    assert torch.allclose(first, torch.nn.functional.silu(x[0, 0] * w[:, 3]))


def test_parse_fusions() -> None:
    assert parse_fusions("") == () and parse_fusions("none") == ()
    assert parse_fusions("all") == ALL == ("conv-silu", "concat-in-proj", "add-norm")
    assert parse_fusions("add-norm, conv-silu") == ("conv-silu", "add-norm")   # canonical order
    with pytest.raises(BackendError, match="Unknown fusion 'conv'"):
        parse_fusions("conv")


def _scores(model: DecisionModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model.backbone(input_ids=ids, use_cache=False).last_hidden_state.clone()


def _model(checkpoint: Path, fusions: tuple[str, ...] = ()) -> DecisionModel:
    return DecisionModel.from_package(read_package(checkpoint), Settings(mode="fast", device="cpu", fusions=fusions))


def test_add_norm_alone_is_bit_identical(fixture_checkpoint: Path) -> None:
    plain, fused = _model(fixture_checkpoint), _model(fixture_checkpoint, ("add-norm",))
    ids = torch.randint(0, plain.backbone.config.vocab_size, (1, 83), generator=torch.Generator().manual_seed(1))
    assert "layers" in fused.info.fusions
    assert torch.equal(_scores(plain, ids), _scores(fused, ids))


def test_every_fusion_scores_like_the_library_and_is_reported(fixture_checkpoint: Path) -> None:
    plain, fused = _model(fixture_checkpoint), _model(fixture_checkpoint, FUSIONS)
    config = plain.backbone.config
    linear = sum(1 for kind in config.layer_types if kind == "linear_attention")
    assert fused.info.fusions == (f"conv-silu, concat-in-proj, concat-gate-up, add-norm, gated-norm, grouped-qk, beta-g, "
                                     f"silu-mul, silu-mul-fp32, triton-gated-norm "
                                     f"({linear} linear attention, {config.num_hidden_layers} MLPs, "
                                     f"{config.num_hidden_layers} layers, {linear} gated norms)")
    assert fused.describe()["fusions"] == fused.info.fusions
    assert fused.info.weights.weights_fingerprint == plain.info.weights.weights_fingerprint   # taken before concatenating
    assert fused.info.non_embedding_parameters == plain.info.non_embedding_parameters
    for length in (1, 4, 97):
        ids = torch.randint(0, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(length))
        a, b = _scores(plain, ids), _scores(fused, ids)
        assert float((a - b).norm() / a.norm()) < 1e-5, length


def test_gated_norm_function_is_the_library_module_bit_for_bit() -> None:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from openjev_repro.backend.fast_layers import gated_rms_norm

    for seed, dtype in enumerate((torch.float32, torch.bfloat16)):
        g = torch.Generator().manual_seed(40 + seed)
        norm = qwen.Qwen3_5RMSNormGated(128, eps=1e-6).to(dtype)
        with torch.no_grad():
            norm.weight.copy_(torch.randn(128, generator=g).to(dtype))
        x, z = (torch.randn(301, 128, generator=g).to(dtype) * 3 for _ in range(2))
        expect = norm(x, z)
        got = gated_rms_norm(x, z, norm.weight, norm.variance_epsilon)
        assert got.dtype == dtype and torch.equal(got, expect), dtype
        assert not torch.equal(got, gated_rms_norm(x, -z, norm.weight, norm.variance_epsilon))   # the gate counts


def test_beta_and_decay_is_the_library_arithmetic() -> None:
    from openjev_repro.backend.fast_layers import beta_and_decay

    g = torch.Generator().manual_seed(5)
    b, a = (torch.randn(1, 77, 48, generator=g).bfloat16() * 4 for _ in range(2))
    a_log, dt_bias = torch.randn(48, generator=g), torch.randn(48, generator=g)
    beta, decay = beta_and_decay(b, a, a_log, dt_bias)
    assert torch.equal(beta, b.sigmoid())
    assert torch.equal(decay, -a_log.float().exp() * torch.nn.functional.softplus(a.float() + dt_bias))
    assert decay.dtype == torch.float32 and bool((decay < 0).all())


@pytest.mark.parametrize("fusions", [("gated-norm",), ("grouped-qk",), ("beta-g",),
                                     ("add-norm", "gated-norm", "grouped-qk", "beta-g")])
def test_gated_norm_grouped_qk_beta_g_are_bit_identical_eager(fixture_checkpoint: Path, fusions: tuple[str, ...]) -> None:
    # eager, the gated norm is the library's arithmetic; with the PyTorch reference kernel (no FLA here)
    # grouped-qk still repeats q and k, so both must leave every bit as it was (the GPU check of FLA's
    # grouped heads against the repeated ones is scripts/h200-kernel-check.py)
    plain, fused = _model(fixture_checkpoint), _model(fixture_checkpoint, fusions)
    config = plain.backbone.config
    if "gated-norm" in fusions:
        linear = sum(1 for kind in config.layer_types if kind == "linear_attention")
        assert f"{linear} gated norms" in fused.info.fusions
    for length in (1, 97):
        ids = torch.randint(0, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(7 + length))
        assert torch.equal(_scores(plain, ids), _scores(fused, ids)), length


def test_library_classes_untouched(fixture_checkpoint: Path) -> None:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    fused = _model(fixture_checkpoint, FUSIONS)
    assert qwen.Qwen3_5GatedDeltaNet.forward.__qualname__ == "Qwen3_5GatedDeltaNet.forward"
    assert qwen.Qwen3_5DecoderLayer.forward.__qualname__ == "Qwen3_5DecoderLayer.forward"
    assert qwen.Qwen3_5RMSNormGated.forward.__qualname__ == "Qwen3_5RMSNormGated.forward"
    assert any("forward" in vars(m) for m in fused.backbone.modules())


def test_fuse_is_refused_in_raw_mode(fixture_checkpoint: Path) -> None:
    with pytest.raises(BackendError, match="fast mode only"):
        DecisionModel.from_package(read_package(fixture_checkpoint),
                                   Settings(mode="raw", device="cpu", fusions=("conv-silu",)))


def test_cached_template_ids_equal_the_template_path_on_every_fixture_request(fixture_root: Path) -> None:
    from openjev_repro.backend.prompts import MODEL_ALIASES, chat_prompt, parse_request, render_text
    from openjev_repro.backend.template_ids import TemplateIds

    model = DecisionModel.from_package(read_package(fixture_root / "checkpoint"),
                                       Settings(mode="fast", device="cpu", prompt_ids="cached"))
    cache = model.template_ids
    assert cache is not None and cache.status == "cached" and cache.enabled
    assert model.describe()["prompt_ids"] == "cached"
    texts = []
    for name in ("demo-noul.jsonl", "h200-74-lengths.jsonl"):
        for line in (fixture_root / "requests" / name).read_text().splitlines():
            task = json.loads(line)
            _, state, questions = parse_request({"model": MODEL_ALIASES[0], "state": task["state"],
                                                 "questions": {task["id"]: task["question"]}}, MODEL_ALIASES)
            texts += [render_text(state, q, None) for q in questions]
    assert len(texts) == 98
    for text in texts + [" leading space", "\n\nleading newlines", ""]:
        assert cache.ids(text) == chat_prompt(model.tokenizer, text)
    assert [c.ids for c in model.candidates(state, questions)] == [chat_prompt(model.tokenizer, texts[-1])]
    broken = TemplateIds(model.tokenizer)
    broken.suffix = broken.suffix[1:]        # a wrong cache is caught by the probes at load
    assert broken.ids("x") != chat_prompt(model.tokenizer, "x")


def test_compiled_gated_norm_keeps_the_library_roundings() -> None:
    # Inductor (CPU here, Triton on the GPU) drops intermediate BF16 roundings unless told to emulate them:
    # without it about 35% of the gated norm's outputs moved (profile-2026-12-02); with it nearly none
    import shutil

    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from openjev_repro.backend.fast_layers import gated_rms_norm
    from openjev_repro.backend.fusion import compile_function

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("Inductor on CPU needs a C++ compiler")
    g = torch.Generator().manual_seed(9)
    norm = qwen.Qwen3_5RMSNormGated(128, eps=1e-6).bfloat16()
    with torch.no_grad():
        norm.weight.copy_(torch.randn(128, generator=g))
    x, z = (torch.randn(600, 128, generator=g).bfloat16() * 3 for _ in range(2))
    with torch.inference_mode():
        expect = norm(x, z)
        got = compile_function(gated_rms_norm)(x, z, norm.weight, 1e-6)
    assert gated_rms_norm.keep_roundings is True
    assert float((got != expect).float().mean()) < 1e-3

"""Fast mode's fused elementwise functions compute exactly what the library's modules compute.

`fuse_elementwise` patches module instances; with the identity as compiler (Inductor needs a
GPU or a C++ toolchain, and the compiled kernels are what the H200 study measures), a patched
fixture model must give bit-identical hidden states and scores, patch every RMSNorm and MLP,
and leave the library's classes (so a raw model in the same process) untouched.
"""

from __future__ import annotations

from pathlib import Path

import torch

from openjev_repro.backend.fusion import fuse_elementwise
from openjev_repro.backend.model import DecisionModel, Settings
from openjev_repro.backend.package import read_package


def _model(checkpoint: Path) -> DecisionModel:
    return DecisionModel.from_package(read_package(checkpoint), Settings(mode="fast", device="cpu"))


def test_fused_functions_give_bit_identical_scores_and_patch_every_module(fixture_checkpoint: Path) -> None:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    model, untouched = _model(fixture_checkpoint), _model(fixture_checkpoint)
    config = model.backbone.config
    ids = torch.randint(0, config.vocab_size, (1, 97), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        before = model.backbone(input_ids=ids, use_cache=False).last_hidden_state.clone()
        calls: list[str] = []
        described = fuse_elementwise(model.backbone, compiler=lambda fn: _counting(fn, calls))
        after = model.backbone(input_ids=ids, use_cache=False).last_hidden_state
        other = untouched.backbone(input_ids=ids, use_cache=False).last_hidden_state
    assert torch.equal(before, after) and torch.equal(before, other)
    layers = config.num_hidden_layers
    attention = sum(1 for kind in config.layer_types if kind == "full_attention")
    norms = 2 * layers + 1 + 2 * attention   # two per layer, the final norm, q/k norms of attention layers
    assert described.startswith(f"fused RMSNorm ({norms} modules) and SiLU gate ({layers} MLPs)")
    assert calls.count("rms_norm") == norms and calls.count("silu_mul") == layers   # every one went through us
    assert qwen.Qwen3_5RMSNorm.forward.__qualname__ == "Qwen3_5RMSNorm.forward"   # the class is untouched,
    assert all("forward" not in vars(m) for m in untouched.backbone.modules())    # and so is another model


def _counting(fn, calls: list[str]):  # type: ignore[no-untyped-def]
    def wrapped(*args):  # type: ignore[no-untyped-def]
        calls.append(fn.__name__)
        return fn(*args)
    return wrapped

"""Raw-HF launcher: run upstream `jev.server` with Transformers' optional kernels blocked.

    python -m openjev_repro.upstream.hf_raw [--expect-linear-layers 48] --checkpoint DIR --max-length N ...

Inside the upstream environment (PYTHONPATH holding this repository), before any model class
is imported, Transformers' `is_flash_linear_attention_available` and `is_causal_conv1d_available`
are made to return False, so Gated DeltaNet layers take the PyTorch fallback even where FLA
and causal-conv1d are installed. Every model loaded through `from_pretrained` is then checked:
each linear-attention layer must use `torch_chunk_gated_delta_rule`, the stock convolution and
`Qwen3_5RMSNormGated`, and their number must equal --expect-linear-layers; otherwise the
launcher exits before the server binds. All other arguments go to `python -m jev.server`.
Written against the Transformers API only; no upstream code is copied.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from typing import NamedTuple

__all__ = ["LinearAttentionLayer", "assert_pytorch_fallback", "block_optional_kernels", "install_load_check", "main"]

_BLOCKED = ("is_flash_linear_attention_available", "is_causal_conv1d_available")


class FallbackError(RuntimeError):
    """The loaded model does not use the PyTorch fallback everywhere it must."""


def block_optional_kernels() -> None:
    """Make Transformers report FLA and causal-conv1d as unavailable. Must run before model imports."""
    already = [m for m in sys.modules if m.startswith("transformers.models.") and ".modeling_" in m]
    if already:
        raise FallbackError(f"model modules were imported before kernels were blocked: {', '.join(sorted(already)[:3])}")
    from transformers import utils
    from transformers.utils import import_utils

    def unavailable() -> bool:
        return False

    for name in _BLOCKED:
        setattr(import_utils, name, unavailable)
        if hasattr(utils, name):
            setattr(utils, name, unavailable)


def _is_linear_attention(module) -> bool:
    return hasattr(module, "chunk_gated_delta_rule") and hasattr(module, "causal_conv1d_fn")


class LinearAttentionLayer(NamedTuple):
    """One linear-attention layer's delta rule, convolution and gated norm implementations."""

    layer: str
    delta_rule: str
    delta_rule_is_torch: bool
    conv: str  # "stock": the module's own convolution
    norm: str


def assert_pytorch_fallback(model, expected: int) -> list[LinearAttentionLayer]:
    """Every linear-attention layer of `model`; FallbackError unless exactly `expected` of them all use
    the fallback."""
    rows = []
    for name, module in model.named_modules():
        if not _is_linear_attention(module):
            continue
        home = sys.modules[type(module).__module__]
        rule = module.chunk_gated_delta_rule
        rows.append(LinearAttentionLayer(
            layer=name, delta_rule=getattr(rule, "__name__", repr(rule)),
            delta_rule_is_torch=rule is getattr(home, "torch_chunk_gated_delta_rule", None),
            conv="stock" if module.causal_conv1d_fn is None else getattr(module.causal_conv1d_fn, "__module__", "?"),
            norm=type(module.norm).__name__))
    bad = [r for r in rows if not (r.delta_rule_is_torch and r.conv == "stock" and r.norm == "Qwen3_5RMSNormGated")]
    if bad:
        raise FallbackError(f"{len(bad)} linear-attention layers do not use the PyTorch fallback, e.g. {bad[0]._asdict()}")
    if len(rows) != expected:
        raise FallbackError(f"found {len(rows)} linear-attention layers, expected {expected}")
    return rows


def install_load_check(expected: int, log=sys.stderr) -> None:
    """Check every model with linear-attention layers right after `from_pretrained` returns it."""
    from transformers.modeling_utils import PreTrainedModel

    original = PreTrainedModel.from_pretrained.__func__  # type: ignore[attr-defined]  # the classmethod's function

    def from_pretrained(cls, *args, **kwargs):
        model = original(cls, *args, **kwargs)
        if any(_is_linear_attention(m) for m in model.modules()):
            rows = assert_pytorch_fallback(model, expected)
            print("openjev-repro hf_raw: " + json.dumps({"verified_linear_attention_layers": len(rows),
                  "delta_rule": "torch_chunk_gated_delta_rule", "conv": "stock", "norm": "Qwen3_5RMSNormGated"}),
                  file=log, flush=True)
        return model

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)  # type: ignore[method-assign,assignment]  # the check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run jev.server with Transformers' PyTorch fallback enforced.")
    parser.add_argument("--expect-linear-layers", type=int, default=48)
    parser.add_argument("--server-module", default="jev.server",
                        help="module to run as __main__ (default: upstream's jev.server; the tests wrap ours)")
    ours, rest = parser.parse_known_args(argv)
    try:
        block_optional_kernels()
        install_load_check(ours.expect_linear_layers)
        sys.argv = [ours.server_module, *rest]
        runpy.run_module(ours.server_module, run_name="__main__", alter_sys=True)
    except FallbackError as exc:
        print(f"openjev-repro hf_raw: refusing to serve: {exc}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

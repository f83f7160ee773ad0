"""What loading found is one frozen ModelInfo; /health's model part (DecisionModel.describe) places it among
the figures that change while serving, in the order /health has always had (its bytes are compared in
tests/test_backend_server.py through the real server)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from openjev_repro.backend.model import DecisionModel, ModelInfo, Settings
from openjev_repro.backend.package import read_package
from openjev_repro.errors import ReproError

HEALTH_MODEL_KEYS = [
    "mode", "device", "prompt_format", "dtype", "implementations", "lora", "lora_modules", "cuda_graphs", "compiled",
    "fusions", "prompt_ids", "prompt_ids_parallel", "hardware", "non_embedding_parameters", "weights_fingerprint",
    "weights_fingerprint_scope", "merged_weights_fingerprint", "weights_fingerprint_seconds", "weights_bytes",
    "torch_threads", "torch_interop_threads", "thread_env", "kernels", "packages", "source_sha256"]


@pytest.fixture(scope="module")
def models(fixture_checkpoint: Path) -> dict[str, DecisionModel]:
    package = read_package(fixture_checkpoint)
    return {mode: DecisionModel.from_package(package, Settings(mode=mode, device="cpu")) for mode in ("raw", "fast")}


def test_the_model_part_of_health_keeps_its_keys_and_their_order(models: dict[str, DecisionModel]) -> None:
    fast, raw = models["fast"].describe(), models["raw"].describe()
    assert list(fast) == HEALTH_MODEL_KEYS  # no FLA here: no autotune key
    assert list(raw) == [k for k in HEALTH_MODEL_KEYS if k != "merged_weights_fingerprint"]  # raw never merges
    assert (raw["lora"], fast["lora"]) == ("unmerged (PEFT)", "merged")
    assert raw["weights_fingerprint"] == fast["weights_fingerprint"] != fast["merged_weights_fingerprint"]
    assert fast["kernels"] == {"requested": "auto", "linear_attention": "reference", "conv": "reference",
                               "norm": "reference", "full_attention": "sdpa"}
    assert fast["implementations"] == models["fast"].info.implementations.to_json() == {
        "linear_attention_layers": 3, "full_attention_layers": 1, "full_attention": "sdpa",
        "chunk_gated_delta_rule": ["torch_chunk_gated_delta_rule"], "causal_conv1d_fn": ["torch (F.conv1d)"],
        "norm": ["Qwen3_5RMSNormGated"]}


def test_model_info_reads_back_from_its_json(models: dict[str, DecisionModel]) -> None:
    for model in models.values():
        assert msgspec.convert(model.info.to_json(), ModelInfo) == model.info


def test_kernels_fla_without_fla_bound_is_refused_while_loading(fixture_checkpoint: Path) -> None:
    with pytest.raises(ReproError, match="--kernels fla: the linear-attention layers are bound to reference"):
        DecisionModel.from_package(read_package(fixture_checkpoint), Settings(mode="fast", device="cpu", kernels="fla"))

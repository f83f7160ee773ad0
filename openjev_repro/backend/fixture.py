"""The fixture model: a tiny Qwen3.5-architecture DecisionModel package, byte-identical on every run.

Layout (the upstream package layout, with the base beside it):

    DIR/base/         config.json, model.safetensors, tokenizer.json, tokenizer_config.json
    DIR/model.json    DIR/adapter/{adapter_config.json, adapter_model.safetensors}
    DIR/head.pt       DIR/temperature.json

Why the bytes are stable: every random number comes from Python's `random.Random(seed)`
(Mersenne Twister, bit-exact on every platform, unlike vectorised torch samplers), scaled in
Python floats and rounded once to float32; weights go through safetensors (sorted keys, no
timestamps); JSON is written by us with a fixed key order; head.pt is serialised into memory
(so the archive name does not depend on the file name; torch writes fixed zip timestamps).
The head's scale and bias come from one calibration forward pass, rounded to a power of two
and a 1/16 grid so that last-bit differences between CPUs cannot change them.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
from pathlib import Path
from typing import Any

from ..decision import TEMPERATURE_27B

__all__ = [
    "CHAT_TEMPLATE",
    "FIXTURE_SEED",
    "LORA_TARGETS",
    "SPECIAL_TOKENS",
    "TEMPERATURE_27B",
    "build_fixture",
    "build_tokenizer",
    "file_table",
    "fixture_config",
    "random_adapter",
    "random_backbone",
    "random_head",
    "write_json",
]

FIXTURE_SEED = 20261003
FIXTURE_ID = "openjev-repro/qwen3_5-fixture-tiny"
FIXTURE_REVISION = "fixture-v1"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "out_proj"]
LORA_RANK = 8
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def write_json(path: Path, data: Any) -> None:
    """JSON with the key order given, two-space indent, LF, trailing newline: stable bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def fixture_config() -> dict[str, Any]:
    """A Qwen3_5TextConfig (as JSON) with both layer types and about 1.3 M parameters."""
    return {
        "model_type": "qwen3_5_text", "architectures": ["Qwen3_5TextModel"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 128, "intermediate_size": 384,
        "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 32,
        "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
        "pad_token_id": 0, "bos_token_id": None, "eos_token_id": 2,
    }


# ---------------------------------------------------------------- tokenizer

def build_tokenizer(out: Path) -> None:
    """Train a byte-level BPE on generated text and save it with a Qwen-style chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from .synthetic import corpus_lines

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes((tok.to_str(pretty=True) + "\n").encode("utf-8"))
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 262144,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "additional_special_tokens": SPECIAL_TOKENS[1:], "add_prefix_space": False,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE})


# ---------------------------------------------------------------- weights

def _uniform(rng: random.Random, shape: tuple[int, ...], low: float, high: float):
    import torch

    count = math.prod(shape)
    span = high - low
    values = [low + span * rng.random() for _ in range(count)]
    return torch.tensor(values, dtype=torch.float64).to(torch.float32).reshape(shape)


def _fill(name: str, default, rng: random.Random):
    """Deterministic value of one backbone parameter (norms keep their constant defaults)."""
    import torch

    shape = tuple(default.shape)
    if "norm" in name:
        if not bool((default == default.flatten()[0]).all()):
            raise AssertionError(f"norm parameter {name} has a non-constant default")
        return default.detach().to(torch.float32).clone()
    if name.endswith("dt_bias"):
        return torch.ones(shape, dtype=torch.float32)
    if name.endswith("A_log"):
        return _uniform(rng, shape, 0.0, math.log(16.0))
    if name.endswith("embed_tokens.weight"):
        return _uniform(rng, shape, -1.0, 1.0)
    fan_in = shape[-1] if len(shape) > 1 else shape[0]
    if "conv1d" in name:
        fan_in = shape[-1]
    bound = 1.0 / math.sqrt(fan_in)
    return _uniform(rng, shape, -bound, bound)


def random_backbone(config_dict: dict[str, Any], seed: int, device: str = "cpu", dtype=None):
    """A Qwen3_5TextModel whose every parameter is a function of (config, seed) alone."""
    import torch
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

    config = Qwen3_5TextConfig(**{k: v for k, v in config_dict.items() if k not in ("model_type", "architectures")})
    config._attn_implementation = "sdpa"
    model = Qwen3_5TextModel(config)
    rng = random.Random(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            param.copy_(_fill(name, param, rng))
    # transformers wraps Module.to with functools.wraps, whose typeshed signature loses the bound self
    return model.to(device=device, dtype=dtype or torch.float32).eval()  # type: ignore[call-arg]


def random_adapter(model, seed: int):
    """Wrap `model` in a PEFT LoRA (rank 8, alpha 16) with seeded, non-zero A and B."""
    import torch
    from peft import LoraConfig, get_peft_model

    peft_cfg = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0, bias="none",
                          target_modules=list(LORA_TARGETS))   # as build_fixture writes adapter_config.json
    peft_model = get_peft_model(model, peft_cfg)
    rng = random.Random(seed + 1)
    with torch.no_grad():
        for name, param in sorted(peft_model.named_parameters()):
            if "lora_A" in name:
                bound = 1.0 / math.sqrt(param.shape[1])
                param.copy_(_uniform(rng, tuple(param.shape), -bound, bound).to(param.dtype))
            elif "lora_B" in name:
                param.copy_(_uniform(rng, tuple(param.shape), -0.05, 0.05).to(param.dtype))
    return peft_model.eval()


def random_head(hidden: int, seed: int):
    """An FP32 Linear(hidden, 1) with a seeded direction (scale 1, bias 0 before calibration)."""
    import torch

    head = torch.nn.Linear(hidden, 1, bias=True, dtype=torch.float32)
    rng = random.Random(seed + 2)
    with torch.no_grad():
        head.weight.copy_(_uniform(rng, (1, hidden), -1.0, 1.0) / math.sqrt(hidden))
        head.bias.zero_()
    return head


def _calibrate(peft_model, head, tokenizer, temperature: float) -> None:
    """Scale and shift the head so s/T spreads around 0 on typical prompts (coarsely rounded)."""
    import torch

    from .prompts import chat_prompt
    from .synthetic import calibration_texts

    scores = []
    with torch.no_grad():
        for text in calibration_texts():
            ids = torch.tensor([chat_prompt(tokenizer, text)])
            hidden = peft_model(input_ids=ids).last_hidden_state[0, -1].float()
            scores.append(float(head(hidden)))
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores)) or 1.0
    scale = 2.0 ** round(math.log2(1.5 * temperature / std))
    with torch.no_grad():
        head.weight.mul_(scale)
        head.bias.fill_(-round(mean * scale * 16) / 16)


def build_fixture(out: Path, seed: int = FIXTURE_SEED) -> list[Path]:
    """Write the whole fixture package under `out`; return the files written, sorted."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    out = Path(out)
    base = out / "base"
    torch.set_num_threads(1)  # one reduction order for the calibration pass
    build_tokenizer(base)
    config = fixture_config()
    write_json(base / "config.json", config)
    model = random_backbone(config, seed)
    state = {k: v.contiguous() for k, v in sorted(model.state_dict().items())}
    save_file(state, str(base / "model.safetensors"), metadata={"format": "pt"})

    peft_model = random_adapter(model, seed)
    write_json(out / "adapter" / "adapter_config.json", {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": FIXTURE_ID, "revision": None,
        "r": LORA_RANK, "lora_alpha": 2 * LORA_RANK, "lora_dropout": 0.0, "bias": "none",
        "target_modules": LORA_TARGETS, "fan_in_fan_out": False, "inference_mode": True,
        "init_lora_weights": True, "modules_to_save": None, "use_dora": False, "use_rslora": False})
    from peft import get_peft_model_state_dict
    lora = {k: v.contiguous() for k, v in sorted(get_peft_model_state_dict(peft_model, save_embedding_layers=False).items())}
    save_file(lora, str(out / "adapter" / "adapter_model.safetensors"), metadata={"format": "pt"})

    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    head = random_head(model.config.hidden_size, seed)
    _calibrate(peft_model, head, tokenizer, TEMPERATURE_27B)
    buffer = io.BytesIO()   # serialised in memory: the archive's name does not depend on the file's
    torch.save({"weight": head.weight.detach().clone(), "bias": head.bias.detach().clone()}, buffer)
    (out / "head.pt").write_bytes(buffer.getvalue())
    write_json(out / "temperature.json", {"temperature": TEMPERATURE_27B})
    write_json(out / "model.json", {"format_version": 1, "base_model": "base", "base_model_id": FIXTURE_ID,
                                    "base_revision": FIXTURE_REVISION, "max_length": 4096,
                                    "head": "head.pt", "adapter": "adapter", "temperature": "temperature.json"})
    return sorted(p for p in out.rglob("*") if p.is_file())


def file_table(root: Path, files: list[Path]) -> list[tuple[str, int, str]]:
    """(relative path, size, sha256) of each file, sorted by path."""
    rows = []
    for path in sorted(files):
        data = path.read_bytes()
        rows.append((str(path.relative_to(root)), len(data), hashlib.sha256(data).hexdigest()))
    return rows

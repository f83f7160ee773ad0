"""The upstream checkpoint package layout, checked before anything heavy is loaded.

    DIR/model.json          {"format_version": 1, "base_model": "base", "base_model_id": ...,
                             "base_revision": ..., "max_length": 4096}
    DIR/adapter/            adapter_config.json + adapter_model.safetensors (PEFT LoRA)
    DIR/head.pt             state dict of an FP32 Linear(hidden, 1): weight [1, hidden], bias [1]
    DIR/temperature.json    {"temperature": T}
    base (DIR/base or the path model.json names): config.json, *.safetensors, tokenizer files

Every problem is a CheckpointError that names the offending file; a model.json of a format_version
this tool does not read is an UnsupportedFormat (evidence.files.check_format). model.json and the
base's config.json are decoded into types once (`ModelJson`, `_BaseConfig`); keys this tool does not
read are left alone (the package and the base model are other projects' files).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..errors import CheckpointError
from ..evidence.files import check_format
from ..hashing import hash_file

__all__ = ["MODEL_JSON_FORMAT", "Package", "load_head", "package_sha256", "read_package"]

MODEL_JSON_FORMAT = 1
PACKAGE_FILES = ("model.json", "adapter/adapter_config.json", "adapter/adapter_model.safetensors",
                 "head.pt", "temperature.json")


class ModelJson(msgspec.Struct, frozen=True, kw_only=True):
    """model.json, the keys read (format_version is checked before: evidence.files.check_format)."""

    format_version: int = MODEL_JSON_FORMAT
    base_model: str = "base"  # the base model's directory, relative to the package unless absolute
    base_model_id: str | None = None  # None: the base directory's name
    base_revision: str = "unknown"
    max_length: int = 4096


class _TextConfig(msgspec.Struct, frozen=True):
    hidden_size: int | None = None


class _BaseConfig(_TextConfig, frozen=True):
    """The base's config.json: a text model's, or a multimodal model's holding `text_config`."""

    text_config: _TextConfig | None = None


@dataclass(frozen=True)
class Package:
    root: Path
    base: Path
    base_model_id: str
    base_revision: str
    max_length: int
    temperature: float
    hidden_size: int

    @property
    def adapter(self) -> Path:
        return self.root / "adapter"

    @property
    def head(self) -> Path:
        return self.root / "head.pt"


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"Checkpoint file {path} is missing; rebuild or re-download the package.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"Checkpoint file {path} is not valid JSON ({exc}).") from exc


def _temperature(path: Path) -> float:
    data = _read_json(path)
    value = data.get("temperature") if isinstance(data, dict) else data
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(f"Checkpoint file {path} must hold a positive finite \"temperature\", got {value!r}.")
    return float(value)


def _check_base(base: Path) -> int:
    try:
        config = msgspec.convert(_read_json(base / "config.json"), _BaseConfig)
        hidden = (config.text_config or config).hidden_size
    except msgspec.ValidationError:
        hidden = None
    if hidden is None or hidden <= 0:
        raise CheckpointError(f"Checkpoint file {base / 'config.json'} has no positive integer hidden_size.")
    if not any(base.glob("*.safetensors")):
        raise CheckpointError(f"Base model directory {base} holds no *.safetensors weights.")
    if not (base / "tokenizer.json").is_file() and not (base / "tokenizer_config.json").is_file():
        raise CheckpointError(f"Base model directory {base} holds no tokenizer (tokenizer.json is missing).")
    return hidden


def load_head(path: Path, hidden_size: int) -> dict[str, Any]:
    """Load head.pt (weights only) and check it is Linear(hidden_size, 1) with bias."""
    import torch

    if not path.is_file():
        raise CheckpointError(f"Checkpoint file {path} is missing; rebuild or re-download the package.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt archive
        raise CheckpointError(f"Checkpoint file {path} is not a readable torch state dict ({exc}).") from exc
    weight, bias = (state.get("weight"), state.get("bias")) if isinstance(state, dict) else (None, None)
    if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (1, hidden_size):
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
        raise CheckpointError(f"Checkpoint file {path} must hold weight of shape (1, {hidden_size}), got {shape}.")
    if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (1,):
        shape = tuple(bias.shape) if isinstance(bias, torch.Tensor) else None
        raise CheckpointError(f"Checkpoint file {path} must hold bias of shape (1,), got {shape}.")
    return {"weight": weight.float(), "bias": bias.float()}


def read_package(root: Path) -> Package:
    """Check the whole package layout (and the head's shape) and return its settings."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(f"Checkpoint directory {root} does not exist.")
    where = f"Checkpoint file {root / 'model.json'}"
    try:
        meta = msgspec.convert(check_format(_read_json(root / "model.json"), (MODEL_JSON_FORMAT,), where,
                                            absent=MODEL_JSON_FORMAT), ModelJson)
    except msgspec.ValidationError as exc:
        raise CheckpointError(f"{where}: {exc}.") from exc
    base = Path(meta.base_model)
    base = base if base.is_absolute() else root / base
    if not base.is_dir():
        raise CheckpointError(f"Base model directory {base} named by {root / 'model.json'} does not exist.")
    for name in PACKAGE_FILES:
        if not (root / name).is_file():
            raise CheckpointError(f"Checkpoint file {root / name} is missing; rebuild or re-download the package.")
    _read_json(root / "adapter" / "adapter_config.json")
    hidden = _check_base(base)
    load_head(root / "head.pt", hidden)
    if meta.max_length <= 0:
        raise CheckpointError(f"{where}: max_length must be a positive integer.")
    return Package(root=root, base=base, base_model_id=base.name if meta.base_model_id is None else meta.base_model_id,
                   base_revision=meta.base_revision, max_length=meta.max_length,
                   temperature=_temperature(root / "temperature.json"), hidden_size=hidden)


def package_sha256(root: Path) -> str:
    """One digest of the adapter package: SHA256 over "<sha256>  <relative path>\\n" lines, sorted by path.

    The base weights are pinned by base_revision instead; hashing 55 GB at every start would be slow.
    """
    lines = []
    for name in sorted(PACKAGE_FILES):
        digest = hash_file(Path(root) / name)
        lines.append(f"{digest}  {name}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()

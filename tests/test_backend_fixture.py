"""The fixture checkpoint, the package checks and the synthetic request files."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.backend.fixture import LORA_TARGETS, fixture_config
from openjev_repro.backend.package import package_sha256, read_package
from openjev_repro.backend.synthetic import H200_NOUL_INPUT_TOKENS, write_lengths_requests
from openjev_repro.errors import CheckpointError, RecipeError

REPO = Path(__file__).resolve().parents[1]


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_invoke_fixture_is_byte_identical_to_an_independent_build(fixture_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    result = subprocess.run([str(Path(sys.executable).parent / "invoke"), "fixture", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    first, second = _hashes(fixture_root), _hashes(out)
    assert set(first) == {"checkpoint/model.json", "checkpoint/head.pt", "checkpoint/temperature.json",
                          "checkpoint/adapter/adapter_config.json", "checkpoint/adapter/adapter_model.safetensors",
                          "checkpoint/base/config.json", "checkpoint/base/model.safetensors",
                          "checkpoint/base/tokenizer.json", "checkpoint/base/tokenizer_config.json",
                          "requests/demo-noul.jsonl", "requests/h200-74-lengths.jsonl"}
    assert first == second
    for name, digest in first.items():  # the task prints every file with its sha256
        assert f"{digest}" in result.stdout and name in result.stdout


def test_fixture_refuses_a_non_empty_output(fixture_root: Path) -> None:
    result = subprocess.run([str(Path(sys.executable).parent / "invoke"), "fixture", "--out", str(fixture_root)],
                            cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1 and "already holds files" in result.stderr


def test_fixture_model_shape(fixture_checkpoint: Path) -> None:
    from safetensors.torch import load_file

    config = json.loads((fixture_checkpoint / "base" / "config.json").read_text())
    assert set(config["layer_types"]) == {"linear_attention", "full_attention"}
    weights = load_file(fixture_checkpoint / "base" / "model.safetensors")
    params = sum(t.numel() for t in weights.values())
    assert 1_000_000 <= params <= 3_000_000
    lora = load_file(fixture_checkpoint / "adapter" / "adapter_model.safetensors")
    kinds = {name.split(".")[-3] for name in lora}
    assert kinds == set(LORA_TARGETS)
    assert all(t.abs().sum() > 0 for t in lora.values())  # merged vs unmerged must differ in arithmetic
    adapter = json.loads((fixture_checkpoint / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and adapter["lora_alpha"] == 16 and adapter["target_modules"] == LORA_TARGETS
    package = read_package(fixture_checkpoint)
    assert package.hidden_size == fixture_config()["hidden_size"]
    assert package.temperature == 2.5343690298472983


def test_chat_template_disables_thinking(fixture_checkpoint: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(fixture_checkpoint / "base"), local_files_only=True)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("missing", ["model.json", "head.pt", "temperature.json", "adapter/adapter_config.json",
                                     "adapter/adapter_model.safetensors", "base/config.json"])
def test_package_missing_file_is_named(fixture_checkpoint: Path, tmp_path: Path, missing: str) -> None:
    root = _copy(fixture_checkpoint, tmp_path / "ckpt")
    (root / missing).unlink()
    with pytest.raises(CheckpointError, match=Path(missing).name):
        read_package(root)


def test_package_wrong_head_shape(fixture_checkpoint: Path, tmp_path: Path) -> None:
    import torch

    root = _copy(fixture_checkpoint, tmp_path / "ckpt")
    torch.save({"weight": torch.zeros(1, 7), "bias": torch.zeros(1)}, root / "head.pt")
    with pytest.raises(CheckpointError, match=r"head\.pt.*\(1, 128\)"):
        read_package(root)


def test_package_digest_follows_the_adapter(fixture_checkpoint: Path, tmp_path: Path) -> None:
    root = _copy(fixture_checkpoint, tmp_path / "ckpt")
    before = package_sha256(root)
    (root / "temperature.json").write_text('{"temperature": 2.0}\n')
    assert package_sha256(root) != before


def test_demo_requests_spread_and_labels(fixture_root: Path) -> None:
    from transformers import AutoTokenizer

    from openjev_repro.backend.prompts import Question, chat_prompt, render_text

    tok = AutoTokenizer.from_pretrained(str(fixture_root / "checkpoint" / "base"), local_files_only=True)
    tasks = [json.loads(line) for line in (fixture_root / "requests" / "demo-noul.jsonl").read_text().splitlines()]
    assert len(tasks) >= 24 and len({t["id"] for t in tasks}) == len(tasks)
    lengths = []
    for t in tasks:
        assert set(t) == {"id", "family", "question", "state", "labels", "expected", "split", "group",
                          "provenance", "topic"}
        assert t["question"]["type"] == "noul" and t["labels"] == ["no", "yes"]
        q = Question("q", "noul", t["question"]["instructions"], [], [])
        lengths.append(len(chat_prompt(tok, render_text(t["state"], q))))
    assert max(lengths) >= 10 * min(lengths) and max(lengths) <= 2000
    assert {t["expected"] for t in tasks} == {"yes", "no"}


def test_lengths_requests_are_exact(fixture_root: Path) -> None:
    from transformers import AutoTokenizer

    from openjev_repro.backend.prompts import Question, chat_prompt, render_text

    tok = AutoTokenizer.from_pretrained(str(fixture_root / "checkpoint" / "base"), local_files_only=True)
    tasks = [json.loads(line) for line in
             (fixture_root / "requests" / "h200-74-lengths.jsonl").read_text().splitlines()]
    got = [len(chat_prompt(tok, render_text(t["state"], Question("q", "noul", t["question"]["instructions"], [], []))))
           for t in tasks]
    assert got == H200_NOUL_INPUT_TOKENS and len(set(got)) == 57


def test_lengths_below_the_floor_are_refused(fixture_root: Path, tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="below the shortest prompt"):
        write_lengths_requests(fixture_root / "checkpoint" / "base", [5], tmp_path / "x.jsonl")

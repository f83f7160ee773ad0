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
from openjev_repro.backend.peer_inputs import HUB_COMMIT, HUB_REPO
from openjev_repro.backend.synthetic import H200_NOUL_INPUT_TOKENS, write_lengths_requests
from openjev_repro.errors import CheckpointError, RecipeError

REPO = Path(__file__).resolve().parents[1]
# What a foreign server needs to load the fixture offline (backend/peer_inputs.py): copies and its config.
_SNAPSHOT = f"peers/hf-cache/models--{HUB_REPO.replace('/', '--')}/snapshots/{HUB_COMMIT}"
PEER_FILES = {f"{_SNAPSHOT}/head.pt", f"{_SNAPSHOT}/temperature.json", "peers/jev-compatible-server/decision.json"}


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
                          "requests/demo-noul.jsonl", "requests/h200-74-lengths.jsonl",
                          "requests/demo-noul-upstream.jsonl", "requests/h200-74-lengths-upstream.jsonl",
                          *PEER_FILES}
    assert first == second
    for name in ("head.pt", "temperature.json"):  # the hub copies are the checkpoint's bytes
        assert first[f"{_SNAPSHOT}/{name}"] == first[f"checkpoint/{name}"]
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


@pytest.mark.parametrize(("change", "message"), [
    ({"max_length": "4096"}, r"model\.json: Expected `int`, got `str` - at `\$\.max_length`\.$"),
    ({"base_revision": ["x"]}, r"model\.json: Expected `str`, got `array` - at `\$\.base_revision`\.$"),
    ({"max_length": 0}, r"model\.json: max_length must be a positive integer\.$"),
])
def test_package_model_json_of_another_shape_is_one_error_naming_the_key(fixture_checkpoint: Path, tmp_path: Path,
                                                                         change: dict, message: str) -> None:
    root = _copy(fixture_checkpoint, tmp_path / "ckpt")
    meta = json.loads((root / "model.json").read_text())
    (root / "model.json").write_text(json.dumps({**meta, **change}))
    with pytest.raises(CheckpointError, match=message):
        read_package(root)


def test_package_keys_this_tool_does_not_read_are_left_alone(fixture_checkpoint: Path, tmp_path: Path) -> None:
    root = _copy(fixture_checkpoint, tmp_path / "ckpt")
    meta = json.loads((root / "model.json").read_text())
    (root / "model.json").write_text(json.dumps({**meta, "license": {"name": "apache-2.0"}, "base_model_id": "m/x"}))
    config = json.loads((root / "base" / "config.json").read_text())
    (root / "base" / "config.json").write_text(json.dumps({"text_config": config, "model_type": "wrapper"}))
    package = read_package(root)
    assert (package.base_model_id, package.base_revision, package.hidden_size) == ("m/x", "fixture-v1", 128)
    (root / "base" / "config.json").write_text(json.dumps({**config, "hidden_size": True}))
    with pytest.raises(CheckpointError, match="has no positive integer hidden_size"):
        read_package(root)


def test_package_digest_follows_the_adapter(fixture_checkpoint: Path, tmp_path: Path) -> None:
    root = _copy(fixture_checkpoint, tmp_path / "ckpt")
    before = package_sha256(root)
    (root / "temperature.json").write_text('{"temperature": 2.0}\n')
    assert package_sha256(root) != before


def _rendered_lengths(fixture_root: Path, name: str, prompt_format: str) -> list[int]:
    """Each case's token count as the backend renders it (its own validation and renderer)."""
    from transformers import AutoTokenizer

    from openjev_repro.backend.prompts import MODEL_ALIASES, candidate_texts, chat_prompt, parse_request

    tok = AutoTokenizer.from_pretrained(str(fixture_root / "checkpoint" / "base"), local_files_only=True)
    lengths = []
    for line in (fixture_root / "requests" / name).read_text().splitlines():
        task = json.loads(line)
        _, state, (question,) = parse_request({"state": task["state"], "questions": {"q": task["question"]}},
                                              MODEL_ALIASES)
        (text,) = candidate_texts(state, question, prompt_format)
        lengths.append(len(chat_prompt(tok, text)))
    return lengths


@pytest.mark.parametrize("name, prompt_format", [("demo-noul-upstream.jsonl", "upstream"),
                                                 ("demo-noul.jsonl", "criteria-hidden")])
def test_demo_requests_spread_and_labels(fixture_root: Path, name: str, prompt_format: str) -> None:
    tasks = [json.loads(line) for line in (fixture_root / "requests" / name).read_text().splitlines()]
    assert len(tasks) >= 24 and len({t["id"] for t in tasks}) == len(tasks)
    for t in tasks:
        assert set(t) == {"id", "family", "question", "state", "labels", "expected", "split", "group",
                          "provenance", "topic"}
        assert t["question"]["type"] == "noul" and t["labels"] == ["no", "yes"]
        assert t["question"]["criteria"] == {"true": "the statement holds", "false": "it does not"}
    lengths = _rendered_lengths(fixture_root, name, prompt_format)
    assert max(lengths) >= 10 * min(lengths) and 1500 <= max(lengths) <= 2000
    assert {t["expected"] for t in tasks} == {"yes", "no"}


@pytest.mark.parametrize("name, prompt_format", [("h200-74-lengths-upstream.jsonl", "upstream"),
                                                 ("h200-74-lengths.jsonl", "criteria-hidden")])
def test_lengths_requests_are_exact(fixture_root: Path, name: str, prompt_format: str) -> None:
    got = _rendered_lengths(fixture_root, name, prompt_format)
    assert got == H200_NOUL_INPUT_TOKENS and len(set(got)) == 57
    published = REPO.parent / "shared" / "data" / "jevbench-noul-74-input-tokens.json"  # beside the checkout
    if published.is_file():
        assert got == json.loads(published.read_text())["input_tokens"]


def test_upstream_lengths_file_is_26_tokens_longer_under_the_other_format(fixture_root: Path) -> None:
    """The criteria cost 26 tokens with the fixture tokenizer: what the old renderer silently dropped."""
    hidden = _rendered_lengths(fixture_root, "h200-74-lengths-upstream.jsonl", "criteria-hidden")
    assert [n + 26 for n in hidden] == H200_NOUL_INPUT_TOKENS


def test_committed_recipes_name_the_prompt_format_their_requests_were_made_for() -> None:
    """A recipe of our backend runs the format under which its pinned request file has its lengths."""
    from openjev_repro.backend.synthetic import REQUEST_FILES
    from openjev_repro.evidence.recipe import load_recipe

    checked = 0
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        ours = [b for b in recipe.backends if "openjev_repro.backend" in (b.command or [])]
        for workload in recipe.workloads:
            name = Path(workload.requests).name
            if not ours or name not in REQUEST_FILES:
                continue
            for backend in ours:
                command = list(backend.command or [])
                fmt = command[command.index("--prompt-format") + 1] if "--prompt-format" in command else "upstream"
                assert fmt == REQUEST_FILES[name][1], (path.name, backend.name, name, fmt)
                checked += 1
    assert checked >= 8  # demo (2 backends), h200-reference (3), h200-fast (3)


def test_lengths_below_the_floor_are_refused(fixture_root: Path, tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="below the shortest prompt"):
        write_lengths_requests(fixture_root / "checkpoint" / "base", [5], tmp_path / "x.jsonl")

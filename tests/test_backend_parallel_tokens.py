"""`--prompt-ids cached-parallel` (`backend/parallel_tokens.py`): long user texts tokenised in pieces, same ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from openjev_repro.backend import parallel_tokens
from openjev_repro.backend.model import DecisionModel, Settings
from openjev_repro.backend.package import read_package
from openjev_repro.backend.parallel_tokens import ParallelEncoder, cut_points, encode_ids
from openjev_repro.backend.prompts import MODEL_ALIASES, chat_prompt, parse_request, render_text


def _texts(fixture_root: Path) -> list[str]:
    texts = []
    for name in ("demo-noul-upstream.jsonl", "h200-74-lengths-upstream.jsonl", "h200-74-lengths.jsonl"):
        for line in (fixture_root / "requests" / name).read_text().splitlines():
            task = json.loads(line)
            _, state, questions = parse_request({"model": MODEL_ALIASES[0], "state": task["state"],
                                                 "questions": {task["id"]: task["question"]}}, MODEL_ALIASES)
            texts += [render_text(state, q, None) for q in questions]
    return texts


@pytest.fixture(scope="module")
def parallel_model(fixture_root: Path) -> DecisionModel:
    return DecisionModel.from_package(read_package(fixture_root / "checkpoint"),
                                      Settings(mode="fast", device="cpu", prompt_ids="cached-parallel"))


def test_cut_points_are_spaces_between_ascii_letters_or_digits() -> None:
    text = "ab cd, ef  gh 12 ü x"
    for pieces in (2, 3, 5, 9):
        for i in cut_points(text, pieces):
            assert text[i] == " " and text[i - 1].isalnum() and text[i + 1].isalnum() and text[i - 1].isascii()
    assert cut_points("ab cd ef gh", 3) == [5, 8]
    assert cut_points("no-spaces-here" * 50, 4) == [] and cut_points("a ü b", 2) == []   # nothing safe: whole


@pytest.fixture(scope="module")
def fixture_texts(fixture_root: Path) -> list[str]:
    return _texts(fixture_root)


def test_every_fixture_request_gets_the_template_paths_ids_cut_into_pieces(parallel_model: DecisionModel,
                                                                           fixture_texts: list[str],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = parallel_model.template_ids
    assert cache is not None and cache.enabled and cache.encoder is not None
    assert parallel_model.describe()["prompt_ids"] == "cached"
    assert parallel_model.describe()["prompt_ids_parallel"].startswith("parallel from 4000 characters")
    encoder = cache.encoder
    monkeypatch.setattr(encoder, "min_chars", 1)       # cut every text that has a safe place, short ones too
    monkeypatch.setattr(encoder, "pieces", 7)
    cut = 0
    for text in fixture_texts:
        cut += bool(cut_points(text, 7))
        assert cache.ids(text) == chat_prompt(parallel_model.tokenizer, text)
    assert len(fixture_texts) == 172 and cut > 150      # the check really ran on texts in pieces


def test_offsetless_encoding_gives_encodes_ids(parallel_model: DecisionModel, fixture_texts: list[str]) -> None:
    backend = parallel_model.tokenizer.backend_tokenizer
    assert hasattr(backend, "encode_batch_fast")        # the fast path is the one under test, not the fallback
    for text in [*fixture_texts, *parallel_tokens._probes()]:
        assert encode_ids(backend, text) == backend.encode(text, add_special_tokens=False).ids


def test_a_text_with_an_added_tokens_content_is_never_cut(parallel_model: DecisionModel) -> None:
    encoder = parallel_model.template_ids.encoder
    special = encoder.added[0]
    text = ("word " * 1000) + special + (" more" * 1000)
    calls: list[int] = []      # texts per call of the tokenizer's batch encoder
    original = encoder.backend
    class Spy:
        def __getattr__(self, name):
            method = getattr(original, name)
            if not name.startswith("encode_batch"):
                return method
            def batch(texts, **kwargs):
                calls.append(len(texts))
                return method(texts, **kwargs)
            return batch
    encoder.backend = Spy()
    try:
        assert encoder.encode(text) == list(original.encode(text, add_special_tokens=False).ids)
        assert calls == [1]     # whole
        encoder.encode("word " * 1000)
        assert calls == [1, encoder.pieces]
    finally:
        encoder.backend = original


def test_wrong_pieces_are_caught_at_load(parallel_model: DecisionModel, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = parallel_model.tokenizer.backend_tokenizer
    assert ParallelEncoder(backend, pieces=4).enabled
    # cuts every 7 characters, inside words too: some piece boundary splits a merge
    monkeypatch.setattr(parallel_tokens, "cut_points", lambda text, pieces: list(range(7, len(text), 7)))
    broken = ParallelEncoder(backend, pieces=4)
    assert not broken.enabled and broken.status == "whole (ids in pieces differ from the whole text's for a probe)"


def test_off_where_the_argument_does_not_hold(parallel_model: DecisionModel, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = parallel_model.tokenizer.backend_tokenizer
    assert ParallelEncoder(backend, pieces=1).status == "whole (one CPU)"
    word_level = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    assert ParallelEncoder(word_level, pieces=4).status == "whole (unrecognised tokenizer: not a BPE tokenizer)"
    bpe = Tokenizer(models.BPE({"a": 0, "b": 1}, [], unk_token=None))
    bpe.normalizer = normalizers.Lowercase()
    assert ParallelEncoder(bpe, pieces=4).status == "whole (unrecognised tokenizer: normalizer Lowercase)"
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits()])
    assert ParallelEncoder(bpe, pieces=4).status == "whole (unrecognised tokenizer: pre-tokenizer ['Digits', 'Sequence', 'Whitespace'])"
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    off = ParallelEncoder(backend, pieces=4)
    assert not off.enabled and off.status == "whole (TOKENIZERS_PARALLELISM is off)"
    assert off.encode("ab cd " * 2000) == list(backend.encode("ab cd " * 2000, add_special_tokens=False).ids)

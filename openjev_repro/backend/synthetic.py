"""Synthetic JevBench-format request files for the fixture model (no JevBench text is used).

`write_demo_requests` writes noul cases whose rendered prompts span a wide range of token
lengths; `write_lengths_requests` writes one noul case per requested length whose rendered
prompt has exactly that many tokens (what the server reports as usage.input_tokens).
Both are pure functions of their arguments and the tokenizer, so their bytes can be pinned.
`corpus_lines` is the text the fixture tokenizer is trained on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import RecipeError

__all__ = [
    "DEMO_SEED",
    "H200_NOUL_INPUT_TOKENS",
    "WORDS",
    "calibration_texts",
    "corpus_lines",
    "write_demo_requests",
    "write_lengths_requests",
]

DEMO_SEED = 7
# Published per-request input token counts of the study's 74 JevBench noul requests, in request
# order (aggregate figures only, from ../shared/data/jevbench-noul-74-input-tokens.json).
H200_NOUL_INPUT_TOKENS = [
    110, 113, 99, 98, 101, 100, 107, 104, 111, 103, 113, 103, 92, 88, 89,
    90, 92, 96, 96, 93, 85, 86, 101, 103, 90, 88, 96, 99, 88, 89,
    109, 84, 80, 80, 89, 90, 2334, 2426, 2325, 429, 391, 487, 522, 519, 2312,
    1213, 790, 601, 3312, 3399, 936, 241, 218, 292, 198, 206, 308, 288, 212, 231,
    214, 233, 250, 206, 173, 395, 357, 321, 315, 346, 375, 346, 336, 290,
]
WORDS = ["the", "a", "an", "of", "to", "in", "on", "at", "for", "with", "from", "by", "and", "or", "but", "not", "is", "was", "are", "were", "be", "been", "has", "have", "had", "this", "that", "these", "those", "it", "its", "they", "them", "their", "we", "our", "you", "your", "he", "she", "his", "her", "who", "which", "what", "when", "where", "why", "how", "all", "any", "some", "each", "every", "no", "yes", "more", "less", "most", "least", "first", "last", "next", "before", "after", "order", "invoice", "payment", "customer", "account", "balance", "report", "meeting", "schedule", "deadline", "project", "task", "server", "request", "response", "latency", "error", "warning", "status", "ready", "model", "token", "length", "window", "browser", "page", "button", "form", "field", "value", "number", "date", "time", "hour", "minute", "second", "day", "week", "month", "year", "price", "total", "amount", "tax", "discount", "shipping", "delivery", "address", "city", "country", "street", "weather", "rain", "snow", "sun", "temperature", "forecast", "train", "station", "ticket", "flight", "gate", "seat", "passenger", "luggage", "hotel", "room", "booking", "email", "message", "reply", "subject", "draft", "folder", "file", "document", "table", "column", "row", "chart", "figure", "result", "test", "pass", "fail", "check", "score", "level", "option", "answer", "question", "context", "state", "note", "log", "event", "user", "admin", "open", "close", "start", "stop", "move", "click", "type", "scroll", "select", "submit", "cancel", "confirm", "approve", "reject", "wait", "red", "green", "blue", "black", "white", "large", "small", "high", "low", "fast", "slow", "early", "late", "new", "old", "true", "false", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twenty", "hundred", "thousand", "percent", "doctor", "patient", "dose", "library", "book", "author", "chapter", "page", "shelf", "museum", "ticket", "garden", "tree", "river", "mountain", "lake", "bridge", "road"]
_TEMPLATE_TEXT = [
    "Context:\n", "\n\nQuestion: ", "Is the answer to this question yes? Answer Yes or No.",
    "Proposed answer: ", "Is this proposed answer correct? Answer Yes or No.", "Yes", "No",
    "user\n", "assistant\n", "\n\n", '{"amount": 12.5, "items": [1, 2, 3], "status": "open"}',
]


def _sentence(rng: random.Random, low: int = 6, high: int = 16) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", ".", "?", "!", ";", ":"])


def corpus_lines(seed: int = 1, count: int = 4000) -> Iterator[str]:
    """Deterministic training text for the fixture tokenizer."""
    rng = random.Random(seed)
    yield from _TEMPLATE_TEXT * 20
    yield " ".join(WORDS)
    for _ in range(count):
        yield _sentence(rng)


def calibration_texts(seed: int = 3, count: int = 16) -> list[str]:
    """Prompts the fixture head is calibrated on (rendered noul messages of 1 to 12 sentences)."""
    from .prompts import Question, render_text

    rng = random.Random(seed)
    texts = []
    for index in range(count):
        state = " ".join(_sentence(rng) for _ in range(1 + index % 12))
        question = Question("q", "noul", f"Is the word {rng.choice(WORDS)!r} mentioned?", [], [])
        texts.append(render_text(state, question))
    return texts


def _tokenizer(tokenizer_dir: Path):
    from transformers import AutoTokenizer

    path = Path(tokenizer_dir)
    if not path.is_dir():
        raise RecipeError(f"Tokenizer directory {path} does not exist; build the fixture first (invoke fixture).")
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _length(tokenizer: Any, state: Any, instructions: str) -> int:
    from .prompts import Question, chat_prompt, render_text

    return len(chat_prompt(tokenizer, render_text(state, Question("q", "noul", instructions, [], []))))


def _task(task_id: str, state: Any, instructions: str, expected: str, group: str, topic: str) -> dict[str, Any]:
    return {"id": task_id, "family": "synthetic-noul",
            "question": {"type": "noul", "instructions": instructions,
                         "criteria": {"true": "the statement holds", "false": "it does not"}},
            "state": state, "labels": ["no", "yes"], "expected": expected, "split": "synthetic",
            "group": group, "provenance": "openjev-repro synthetic (generated, no JevBench text)",
            "topic": topic}


def _write_jsonl(out_path: Path, tasks: list[dict[str, Any]]) -> Path:
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks)
    out_path.write_bytes(lines.encode("utf-8"))
    return out_path


def _demo_state(rng: random.Random, tokenizer: Any, target: int, as_object: bool, instructions: str) -> Any:
    sentences: list[str] = []
    while True:
        sentences.append(_sentence(rng))
        state: Any = {"events": sentences, "source": "log"} if as_object else " ".join(sentences)
        if _length(tokenizer, state, instructions) >= target:
            return state


def write_demo_requests(tokenizer_dir: Path, out_path: Path, n: int = 24, seed: int = DEMO_SEED) -> Path:
    """n noul cases with rendered lengths spread geometrically from about 60 to about 1500 tokens."""
    if n < 2:
        raise RecipeError("The demo request file needs at least 2 cases.")
    tokenizer = _tokenizer(tokenizer_dir)
    rng = random.Random(seed)
    tasks = []
    for index in range(n):
        target = round(60 * (1500 / 60) ** (index / (n - 1)))
        word = rng.choice(WORDS[40:])
        instructions = f"Does the context mention the word {word!r}?"
        state = _demo_state(rng, tokenizer, target, as_object=index % 3 == 2, instructions=instructions)
        text = json.dumps(state) if not isinstance(state, str) else state
        expected = "yes" if f" {word}" in f" {text.lower()}" else "no"
        tasks.append(_task(f"demo-noul-{index:02d}", state, instructions, expected,
                           group=f"len-{target}", topic="word-lookup"))
    return _write_jsonl(out_path, tasks)


def write_lengths_requests(tokenizer_dir: Path, lengths: list[int], out_path: Path, seed: int = DEMO_SEED) -> Path:
    """One noul case per length whose rendered prompt tokenizes to exactly that length."""
    tokenizer = _tokenizer(tokenizer_dir)
    fillers = [w for w in WORDS if len(tokenizer.encode(" " + w, add_special_tokens=False)) == 1]
    if not fillers:
        raise RecipeError(f"The tokenizer in {tokenizer_dir} has no single-token words to pad prompts with.")
    rng = random.Random(seed)
    instructions = "Is the note about the weather?"
    floor = _length(tokenizer, "Note:", instructions)
    tasks = []
    for index, target in enumerate(lengths):
        if not isinstance(target, int) or target < floor:
            raise RecipeError(f"Length {target!r} at position {index} is below the shortest prompt ({floor} tokens).")
        # " word" is one pre-token of one token, so each filler adds exactly one token.
        state = "Note:" + "".join(" " + rng.choice(fillers) for _ in range(target - floor))
        got = _length(tokenizer, state, instructions)
        if got != target:
            raise RecipeError(f"Could not render a prompt of exactly {target} tokens (got {got}).")
        expected = "yes" if " weather" in state else "no"
        tasks.append(_task(f"len-{index:02d}-{target}", state, instructions, expected,
                           group=f"len-{target}", topic="padding"))
    return _write_jsonl(out_path, tasks)

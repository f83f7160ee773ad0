"""Request validation and prompt rendering for the /v1/systemone contract (facts file, section
"Request -> prompt and answer contract").

Each question becomes one or more candidate sequences. The text of a candidate is

    Context:\\n{state}\\n\\nQuestion: {question text}\\n  + the type's suffix

rendered as one user message through the tokenizer's chat template with
`add_generation_prompt=True` and thinking disabled. Question ids are never shown to the model.
A state, instruction, description or score level that is not a string is rendered as JSON with
sorted keys, non-ASCII kept.

Two prompt formats (`PROMPT_FORMATS`); the request is validated the same way in both:

    upstream         upstream Open-Jev @ 3308a15: noul criteria become `\\nYes means: {true}` and
                     `\\nNo means: {false}` after the instructions (one-sided criteria, our
                     extension, show only the side given); a choice option reads
                     `{name}: {description}`, or `{name}` when its description is null.
    criteria-hidden  this project's renderer until 2026-12-01: noul criteria are not shown and a
                     choice option is its name alone. Kept so that committed recipes that name it
                     render exactly as their runs did.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError

__all__ = [
    "DEFAULT_PROMPT_FORMAT",
    "MAX_CANDIDATES",
    "MAX_CHOICES",
    "MAX_QUESTIONS",
    "MODEL_ALIASES",
    "PROMPT_FORMATS",
    "Question",
    "RequestInvalid",
    "accepted_models",
    "candidate_texts",
    "chat_prompt",
    "parse_request",
    "render_text",
    "render_value",
]

MODEL_ALIASES = ("open-jev", "jev-latest")
# The checkpoint aliases of the contract, accepted when that base model is the one loaded.
CHECKPOINT_ALIASES = {"Qwen/Qwen3.8-27B": "open-jev-27b-v1.1", "Qwen/Qwen3.5-9B": "open-jev-9b"}
MAX_CHOICES = 255
SCORE_LEVELS = (2, 10)
MAX_QUESTIONS = 4096
MAX_CANDIDATES = 65536
PROMPT_FORMATS = ("upstream", "criteria-hidden")
DEFAULT_PROMPT_FORMAT = "upstream"
NOUL_SUFFIX = "Is the answer to this question yes? Answer Yes or No."
OPTION_SUFFIX = "Proposed answer: {option}\nIs this proposed answer correct? Answer Yes or No."
TEXT_KINDS = "a string, an object or an array"


class RequestInvalid(ProtocolError):
    """A request broke the contract; `status` is the HTTP status, `field` the offending path."""

    def __init__(self, message: str, field: str | None = None, status: int = 422):
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(frozen=True)
class Question:
    """One validated question, its texts already rendered (strings as given, the rest as JSON)."""

    qid: str
    type: str                                   # noul | choice | score
    instructions: str
    keys: tuple[str, ...] = ()                  # answer keys: choice option names; score "0".."n-1"
    descriptions: tuple[str | None, ...] = ()   # choice: description or None; score: the level
    levels: tuple[Any, ...] = ()                # score: the levels as given (the answer's legend)
    yes_means: str | None = None                # noul criteria "true"
    no_means: str | None = None                 # noul criteria "false"


def render_value(value: Any) -> str:
    """A string as it is; anything else as Python's json.dumps(sort_keys=True, ensure_ascii=False)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def accepted_models(base_model_id: str) -> tuple[str, ...]:
    """The model names a server of this base model answers to (besides an absent or null model)."""
    alias = CHECKPOINT_ALIASES.get(base_model_id)
    return (*MODEL_ALIASES, base_model_id, *((alias,) if alias else ()))


# ------------------------------------------------------------ validation

def _text(value: Any, path: str, what: str) -> str:
    """A description, instruction or level: a string, an object or an array, rendered."""
    if not isinstance(value, (str, dict, list)):
        raise RequestInvalid(f"{what} must be {TEXT_KINDS}, got {_kind(value)}.", path)
    return render_value(value)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _instructions(raw: dict[str, Any], path: str) -> str:
    value = raw.get("instructions")
    if value is None:
        raise RequestInvalid("instructions are required (a string, an object or an array), as in upstream's "
                             "contract, for every question type.", path)
    if isinstance(value, str) and not value.strip():
        raise RequestInvalid("instructions must not be empty or only whitespace.", path)
    return _text(value, path, "instructions")


def _noul(qid: str, instructions: str, criteria: Any, path: str) -> Question:
    if criteria is None:
        return Question(qid, "noul", instructions)
    if not isinstance(criteria, dict) or not set(criteria) <= {"true", "false"}:
        raise RequestInvalid('noul criteria must be omitted, null or an object with the keys "true" and/or '
                             '"false".', path)
    sides = {key: value for key, value in criteria.items() if value is not None}
    if not sides:
        raise RequestInvalid('noul criteria must describe "true", "false" or both, or be left out (upstream\'s '
                             'contract needs both; one side is our extension).', path)
    rendered = {key: _text(value, f"{path}.{key}", f"noul criteria {key!r}") for key, value in sides.items()}
    return Question(qid, "noul", instructions, yes_means=rendered.get("true"), no_means=rendered.get("false"))


def _choice(qid: str, instructions: str, criteria: Any, path: str) -> Question:
    if not isinstance(criteria, dict):
        raise RequestInvalid("choice criteria must be an object mapping option name to description.", path)
    if not 1 <= len(criteria) <= MAX_CHOICES:
        raise RequestInvalid(f"choice criteria must have 1 to {MAX_CHOICES} options, got {len(criteria)}.", path)
    descriptions = tuple(None if value is None else _text(value, f"{path}.{name}", "a choice description")
                         for name, value in criteria.items())
    return Question(qid, "choice", instructions, keys=tuple(criteria), descriptions=descriptions)


def _score(qid: str, instructions: str, criteria: Any, path: str) -> Question:
    low, high = SCORE_LEVELS
    if not isinstance(criteria, list):
        raise RequestInvalid("score criteria must be an array of levels.", path)
    if not low <= len(criteria) <= high:
        raise RequestInvalid(f"score criteria must have {low} to {high} levels, got {len(criteria)}.", path)
    rendered = []
    for index, level in enumerate(criteria):
        if isinstance(level, (int, float)) and not isinstance(level, bool):
            if not math.isfinite(level):
                raise RequestInvalid("a score level must be a finite number.", f"{path}[{index}]")
            rendered.append(render_value(level))   # numbers too: our extension of upstream
        else:
            rendered.append(_text(level, f"{path}[{index}]", "a score level (or a number)"))
    return Question(qid, "score", instructions, keys=tuple(str(i) for i in range(len(criteria))),
                    descriptions=tuple(rendered), levels=tuple(criteria))


BUILDERS = {"noul": _noul, "choice": _choice, "score": _score}


def _question(qid: str, raw: Any) -> Question:
    path = f"questions.{qid}"
    if not isinstance(raw, dict):
        raise RequestInvalid("each question must be an object.", path)
    kind = raw.get("type")
    if kind not in BUILDERS:
        raise RequestInvalid('type must be "noul", "choice" or "score".', f"{path}.type")
    instructions = _instructions(raw, f"{path}.instructions")
    return BUILDERS[kind](qid, instructions, raw.get("criteria"), f"{path}.criteria")


def _model(body: dict[str, Any], accepted: tuple[str, ...]) -> str:
    model = body.get("model")
    if model is None:
        return MODEL_ALIASES[0]
    if not isinstance(model, str):
        raise RequestInvalid("model must be a string or null.", "model")
    if model not in accepted:
        raise RequestInvalid(f"unknown model {model!r}; accepted: {', '.join(accepted)} (or no model).", "model")
    return model


def _candidate_count(questions: list[Question]) -> int:
    return sum(len(q.keys) if q.type != "noul" else 1 for q in questions)


def parse_request(body: Any, accepted: tuple[str, ...]) -> tuple[str, Any, list[Question]]:
    """Validate a decoded JSON body; return (model name, state, questions in request order)."""
    if not isinstance(body, dict):
        raise RequestInvalid("the request body must be a JSON object.", "")
    model = _model(body, accepted)
    if "state" not in body:
        raise RequestInvalid("state is required (a string, object or array).", "state")
    state = body["state"]
    if not isinstance(state, (str, dict, list)):
        raise RequestInvalid("state must be a string, object or array.", "state")
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        raise RequestInvalid("questions must be a non-empty object mapping id to question.", "questions")
    if len(questions) > MAX_QUESTIONS:
        raise RequestInvalid(f"at most {MAX_QUESTIONS} questions per request, got {len(questions)}.", "questions")
    parsed = [_question(str(qid), raw) for qid, raw in questions.items()]
    count = _candidate_count(parsed)
    if count > MAX_CANDIDATES:
        raise RequestInvalid(f"at most {MAX_CANDIDATES} candidate sequences per request, got {count}.", "questions")
    return model, state, parsed


# ------------------------------------------------------------ rendering

def _check_format(prompt_format: str) -> None:
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt format {prompt_format!r}; use one of {', '.join(PROMPT_FORMATS)}.")


def question_text(question: Question, prompt_format: str = DEFAULT_PROMPT_FORMAT) -> str:
    """What follows `Question: `: the instructions, in upstream's format with the noul criteria."""
    _check_format(prompt_format)
    text = question.instructions
    if prompt_format == "upstream":
        if question.yes_means is not None:
            text += f"\nYes means: {question.yes_means}"
        if question.no_means is not None:
            text += f"\nNo means: {question.no_means}"
    return text


def option_texts(question: Question, prompt_format: str = DEFAULT_PROMPT_FORMAT) -> list[str]:
    """The proposed answer of each candidate of a choice or score question (none for noul)."""
    _check_format(prompt_format)
    if question.type == "score":
        return [str(level) for level in question.descriptions]
    if question.type != "choice":
        return []
    if prompt_format == "criteria-hidden":
        return list(question.keys)
    return [name if text is None else f"{name}: {text}"
            for name, text in zip(question.keys, question.descriptions, strict=True)]


def render_text(state: Any, question: Question, option: str | None = None,
                prompt_format: str = DEFAULT_PROMPT_FORMAT) -> str:
    """The user message of one candidate sequence (`option`: the proposed answer's text)."""
    head = f"Context:\n{render_value(state)}\n\nQuestion: {question_text(question, prompt_format)}\n"
    if question.type == "noul":
        return head + NOUL_SUFFIX
    return head + OPTION_SUFFIX.format(option=option)


def candidate_texts(state: Any, question: Question, prompt_format: str = DEFAULT_PROMPT_FORMAT) -> list[str]:
    """Every candidate's user message of one question, in answer-key order."""
    if question.type == "noul":
        return [render_text(state, question, None, prompt_format)]
    return [render_text(state, question, option, prompt_format) for option in option_texts(question, prompt_format)]


def chat_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of one candidate: a single user message, generation prompt, thinking disabled."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                        add_generation_prompt=True, enable_thinking=False,
                                        return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]

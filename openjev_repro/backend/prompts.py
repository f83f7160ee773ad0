"""Request validation and prompt rendering for the /v1/systemone contract (facts file).

Each question becomes one or more candidate sequences. The text of a candidate is

    Context:\\n{state}\\n\\nQuestion: {instructions}\\n  + the type's suffix

rendered as one user message through the tokenizer's chat template with
`add_generation_prompt=True` and thinking disabled. Question ids are never shown to the model.
A state or option that is not a string is rendered as JSON with sorted keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError

__all__ = [
    "MAX_CHOICES",
    "MAX_QUESTIONS",
    "MODEL_ALIASES",
    "Question",
    "RequestInvalid",
    "chat_prompt",
    "parse_request",
    "render_text",
]

MODEL_ALIASES = ("open-jev", "jev-latest")
MAX_CHOICES = 255
SCORE_LEVELS = (2, 10)
MAX_QUESTIONS = 64
NOUL_SUFFIX = "Is the answer to this question yes? Answer Yes or No."
OPTION_SUFFIX = "Proposed answer: {option}\nIs this proposed answer correct? Answer Yes or No."


class RequestInvalid(ProtocolError):
    """A request broke the contract; `status` is the HTTP status, `field` the offending path."""

    def __init__(self, message: str, field: str | None = None, status: int = 422):
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(frozen=True)
class Question:
    qid: str
    type: str
    instructions: str
    options: list[str]        # choice: names; score: rendered levels; noul: []
    levels: list[Any]         # score only: the levels as given


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _choice_options(criteria: Any, path: str) -> list[str]:
    if not isinstance(criteria, dict):
        raise RequestInvalid("choice criteria must be an object mapping option name to description.", path)
    if not 1 <= len(criteria) <= MAX_CHOICES:
        raise RequestInvalid(f"choice criteria must have 1 to {MAX_CHOICES} options, got {len(criteria)}.", path)
    for name, description in criteria.items():
        if not name or not isinstance(description, str):
            raise RequestInvalid("each choice option needs a non-empty name and a string description.",
                                 f"{path}.{name}")
    return list(criteria)


def _score_levels(criteria: Any, path: str) -> list[Any]:
    low, high = SCORE_LEVELS
    if not isinstance(criteria, list):
        raise RequestInvalid("score criteria must be a list of levels.", path)
    if not low <= len(criteria) <= high:
        raise RequestInvalid(f"score criteria must have {low} to {high} levels, got {len(criteria)}.", path)
    for index, level in enumerate(criteria):
        if isinstance(level, bool) or not isinstance(level, (str, int, float, dict)):
            raise RequestInvalid("each score level must be a string, number or object.", f"{path}[{index}]")
    return criteria


def _noul_criteria(criteria: Any, path: str) -> None:
    if criteria is None:
        return
    if not isinstance(criteria, dict) or not set(criteria) <= {"true", "false"} or \
            not all(isinstance(v, str) for v in criteria.values()):
        raise RequestInvalid('noul criteria must be omitted or {"true": str, "false": str}.', path)


def _question(qid: str, raw: Any) -> Question:
    path = f"questions.{qid}"
    if not isinstance(raw, dict):
        raise RequestInvalid("each question must be an object.", path)
    kind = raw.get("type")
    if kind not in ("noul", "choice", "score"):
        raise RequestInvalid('type must be "noul", "choice" or "score".', f"{path}.type")
    instructions = raw.get("instructions")
    if not isinstance(instructions, str) or not instructions.strip():
        raise RequestInvalid("instructions must be a non-empty string.", f"{path}.instructions")
    criteria = raw.get("criteria")
    if kind == "noul":
        _noul_criteria(criteria, f"{path}.criteria")
        return Question(qid, kind, instructions, [], [])
    if criteria is None or criteria == {} or criteria == []:
        raise RequestInvalid(f"{kind} questions need non-empty criteria.", f"{path}.criteria")
    if kind == "choice":
        return Question(qid, kind, instructions, _choice_options(criteria, f"{path}.criteria"), [])
    levels = _score_levels(criteria, f"{path}.criteria")
    return Question(qid, kind, instructions, [_json(level) for level in levels], levels)


def parse_request(body: Any, accepted_models: tuple[str, ...]) -> tuple[str, Any, list[Question]]:
    """Validate a decoded JSON body; return (model name, state, questions in request order)."""
    if not isinstance(body, dict):
        raise RequestInvalid("the request body must be a JSON object.", "")
    model = body.get("model", MODEL_ALIASES[0])
    if not isinstance(model, str):
        raise RequestInvalid("model must be a string.", "model")
    if model not in accepted_models:
        raise RequestInvalid(f"unknown model {model!r}; accepted: {', '.join(accepted_models)}.", "model")
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
    return model, state, [_question(str(qid), raw) for qid, raw in questions.items()]


def render_text(state: Any, question: Question, option: str | None = None) -> str:
    """The user message of one candidate sequence."""
    head = f"Context:\n{_json(state)}\n\nQuestion: {question.instructions}\n"
    if question.type == "noul":
        return head + NOUL_SUFFIX
    return head + OPTION_SUFFIX.format(option=option)


def chat_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of one candidate: a single user message, generation prompt, thinking disabled."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                        add_generation_prompt=True, enable_thinking=False,
                                        return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]

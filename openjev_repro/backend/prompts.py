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
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import ProtocolError

__all__ = [
    "DEFAULT_PROMPT_FORMAT",
    "MAX_CANDIDATES",
    "MAX_CHOICES",
    "MAX_QUESTIONS",
    "MODEL_ALIASES",
    "PROMPT_FORMATS",
    "Question",
    "QuestionBody",
    "RequestBody",
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

# A text of the contract: a string as it is, an object or an array rendered as JSON.
JsonText = str | dict[str, object] | list[object]


def _text(value: object, path: str, what: str) -> str:
    """A description, instruction or level: a string, an object or an array, rendered."""
    if not isinstance(value, (str, dict, list)):
        got = "null" if value is None else type(value).__name__
        raise RequestInvalid(f"{what} must be {TEXT_KINDS}, got {got}.", path)
    return render_value(value)


def _decoded(value: object, kind: Any, path: str) -> Any:
    """`value` as the typed body `kind` (msgspec.convert); a mismatch is RequestInvalid naming the field."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, path) from None


def _invalid(exc: msgspec.ValidationError, path: str) -> RequestInvalid:
    """msgspec's mismatch as RequestInvalid: its path (`$.criteria.true`) under `path`, or the missing field."""
    text, at, where = str(exc).partition(" - at `$")
    missing = re.fullmatch(r"Object missing required field `(.+)`", text)
    inner = where.removesuffix("`").removeprefix(".") if at else ""
    field = ".".join(part for part in (path, inner, missing.group(1) if missing else "") if part)
    hint = ' (type is "noul", "choice" or "score")' if field.endswith(".type") else ""
    return RequestInvalid(f"{field or 'the body'}: {text}{hint}.", field)


class NoulCriteria(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """noul criteria: what "true" and "false" mean. Upstream needs both; one side is our extension."""

    true: JsonText | None = None
    false: JsonText | None = None


class _QuestionBody(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """One question of the request body, decoded once; `question` applies the type's rules and renders it.
    Unknown fields are ignored, as in a request's top level."""

    instructions: JsonText | None = None

    def rendered_instructions(self, path: str) -> str:
        if self.instructions is None:
            raise RequestInvalid("instructions are required (a string, an object or an array), as in upstream's "
                                 "contract, for every question type.", f"{path}.instructions")
        if isinstance(self.instructions, str) and not self.instructions.strip():
            raise RequestInvalid("instructions must not be empty or only whitespace.", f"{path}.instructions")
        return render_value(self.instructions)

    def question(self, qid: str, path: str) -> Question:
        raise NotImplementedError


class NoulBody(_QuestionBody, frozen=True, tag="noul"):
    criteria: NoulCriteria | None = None

    def question(self, qid: str, path: str) -> Question:
        instructions = self.rendered_instructions(path)
        if self.criteria is None:
            return Question(qid, "noul", instructions)
        yes, no = self.criteria.true, self.criteria.false
        if yes is None and no is None:
            raise RequestInvalid('noul criteria must describe "true", "false" or both, or be left out (upstream\'s '
                                 'contract needs both; one side is our extension).', f"{path}.criteria")
        return Question(qid, "noul", instructions, yes_means=None if yes is None else render_value(yes),
                        no_means=None if no is None else render_value(no))


class ChoiceBody(_QuestionBody, frozen=True, tag="choice"):
    criteria: dict[str, object]  # option name -> description (a text, or null: the name alone)

    def question(self, qid: str, path: str) -> Question:
        instructions = self.rendered_instructions(path)
        options = self.criteria
        if not 1 <= len(options) <= MAX_CHOICES:
            raise RequestInvalid(f"choice criteria must have 1 to {MAX_CHOICES} options, got {len(options)}.",
                                 f"{path}.criteria")
        descriptions = tuple(None if value is None else _text(value, f"{path}.criteria.{name}", "a choice description")
                             for name, value in options.items())
        return Question(qid, "choice", instructions, keys=tuple(options), descriptions=descriptions)


class ScoreBody(_QuestionBody, frozen=True, tag="score"):
    criteria: list[object]  # the levels, lowest first

    def question(self, qid: str, path: str) -> Question:
        instructions = self.rendered_instructions(path)
        low, high = SCORE_LEVELS
        levels = self.criteria
        if not low <= len(levels) <= high:
            raise RequestInvalid(f"score criteria must have {low} to {high} levels, got {len(levels)}.",
                                 f"{path}.criteria")
        return Question(qid, "score", instructions, keys=tuple(str(i) for i in range(len(levels))),
                        descriptions=tuple(_level(level, f"{path}.criteria[{i}]") for i, level in enumerate(levels)),
                        levels=tuple(levels))


def _level(level: object, path: str) -> str:
    """A score level rendered: a text, or a finite number (our extension of upstream)."""
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        if not math.isfinite(level):
            raise RequestInvalid("a score level must be a finite number.", path)
        return render_value(level)
    return _text(level, path, "a score level (or a number)")


QuestionBody = NoulBody | ChoiceBody | ScoreBody


class RequestBody(msgspec.Struct, frozen=True, kw_only=True):
    """The body of POST /v1/systemone, decoded once (one msgspec.convert). Unknown top-level fields are
    ignored (jevcompat's request.unknown-fields). msgspec's error path does not name a map's key, so
    `decode` finds a failing question again on its own to name its id."""

    state: JsonText
    questions: dict[str, QuestionBody]
    model: str | None = None

    @classmethod
    def decode(cls, body: object) -> RequestBody:
        try:
            return msgspec.convert(body, cls)
        except msgspec.ValidationError as exc:
            if str(exc).endswith("`$.questions[...]`") or "`$.questions[...]." in str(exc):
                assert isinstance(body, dict)
                for qid, raw in body["questions"].items():
                    _decoded(raw, QuestionBody, f"questions.{qid}")
            raise _invalid(exc, "") from None

    def model_name(self, accepted: tuple[str, ...]) -> str:
        """The name the response echoes: the one asked for, or open-jev for none."""
        if self.model is None:
            return MODEL_ALIASES[0]
        if self.model not in accepted:
            raise RequestInvalid(f"unknown model {self.model!r}; accepted: {', '.join(accepted)} (or no model).",
                                 "model")
        return self.model

    def parsed_questions(self) -> list[Question]:
        if not self.questions:
            raise RequestInvalid("questions must be a non-empty object mapping id to question.", "questions")
        if len(self.questions) > MAX_QUESTIONS:
            raise RequestInvalid(f"at most {MAX_QUESTIONS} questions per request, got {len(self.questions)}.",
                                 "questions")
        parsed = [body.question(qid, f"questions.{qid}") for qid, body in self.questions.items()]
        count = sum(len(q.keys) if q.type != "noul" else 1 for q in parsed)
        if count > MAX_CANDIDATES:
            raise RequestInvalid(f"at most {MAX_CANDIDATES} candidate sequences per request, got {count}.",
                                 "questions")
        return parsed


def parse_request(body: object, accepted: tuple[str, ...]) -> tuple[str, JsonText, list[Question]]:
    """Validate a decoded JSON body; return (model name, state, questions in request order)."""
    if not isinstance(body, dict):
        raise RequestInvalid("the request body must be a JSON object.", "")
    request = RequestBody.decode(body)
    return request.model_name(accepted), request.state, request.parsed_questions()


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

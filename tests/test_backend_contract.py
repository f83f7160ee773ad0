"""Upstream's request -> prompt -> answer contract (facts file), checked on exact strings and numbers.

Pure Python: validation and rendering (backend/prompts.py) and the answers (backend/answers.py).
The same contract is checked end to end against the served backend by tests/test_backend_server.py
and by the peer conformance suite in tests/test_conformance.py.
"""

from __future__ import annotations

import math

import pytest

from openjev_repro.backend.answers import answer, softmax
from openjev_repro.backend.prompts import (
    MODEL_ALIASES,
    RequestInvalid,
    accepted_models,
    candidate_texts,
    parse_request,
)

MODELS = accepted_models("openjev-repro/qwen3_5-fixture-tiny")
SUFFIX_NOUL = "Is the answer to this question yes? Answer Yes or No."
SUFFIX_OPTION = "\nIs this proposed answer correct? Answer Yes or No."


def one(question: dict, state: object = "S", model: object = "open-jev") -> object:
    body = {"model": model, "state": state, "questions": {"q": question}}
    return parse_request(body, MODELS)[2][0]


def texts(question: dict, state: object = "S", prompt_format: str = "upstream") -> list[str]:
    return candidate_texts(state, one(question, state), prompt_format)


def refused(body: dict, accepted: tuple[str, ...] = MODELS) -> RequestInvalid:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(body, accepted)
    assert caught.value.status == 422
    return caught.value


def q_body(question: dict) -> dict:
    return {"state": "S", "questions": {"q": question}}


# ------------------------------------------------------------------ prompts

def test_noul_criteria_are_shown_after_the_instructions() -> None:
    q = {"type": "noul", "instructions": "Is it on?", "criteria": {"true": "the lamp glows", "false": "it is dark"}}
    shown = "Context:\nS\n\nQuestion: Is it on?\nYes means: the lamp glows\nNo means: it is dark\n"
    assert texts(q) == [shown + SUFFIX_NOUL]
    # criteria-hidden: this project's renderer before 2026-12-01, for the recipes that name it
    assert texts(q, prompt_format="criteria-hidden") == [f"Context:\nS\n\nQuestion: Is it on?\n{SUFFIX_NOUL}"]


@pytest.mark.parametrize("criteria, shown", [
    ({"true": "glows"}, "\nYes means: glows"),
    ({"false": "dark"}, "\nNo means: dark"),
    ({"true": "glows", "false": None}, "\nYes means: glows"),
    (None, ""),
])
def test_one_sided_and_null_noul_criteria_show_only_what_is_given(criteria, shown: str) -> None:
    q = {"type": "noul", "instructions": "On?", "criteria": criteria}
    assert texts(q) == [f"Context:\nS\n\nQuestion: On?{shown}\n{SUFFIX_NOUL}"]


def test_structured_text_is_sorted_key_json_with_non_ascii_kept() -> None:
    q = {"type": "noul", "instructions": {"z": 1, "a": ["é", {"y": 2, "b": 3}]},
         "criteria": {"true": {"k": "ü", "c": None}, "false": ["x", 1.5]}}
    state = {"b": [1, 2], "a": "ß"}
    expected = ('Context:\n{"a": "ß", "b": [1, 2]}\n\nQuestion: {"a": ["é", {"b": 3, "y": 2}], "z": 1}'
                '\nYes means: {"c": null, "k": "ü"}\nNo means: ["x", 1.5]\n')
    assert texts(q, state) == [expected + SUFFIX_NOUL]


def test_choice_options_carry_their_descriptions() -> None:
    q = {"type": "choice", "instructions": "Team?",
         "criteria": {"Billing": "refunds", "Ops": None, "Sales": {"owns": ["pricing"]}, "Misc": ""}}
    head = "Context:\nS\n\nQuestion: Team?\nProposed answer: "
    assert texts(q) == [head + "Billing: refunds" + SUFFIX_OPTION, head + "Ops" + SUFFIX_OPTION,
                        head + 'Sales: {"owns": ["pricing"]}' + SUFFIX_OPTION, head + "Misc: " + SUFFIX_OPTION]
    assert texts(q, prompt_format="criteria-hidden") == [head + name + SUFFIX_OPTION
                                                         for name in ("Billing", "Ops", "Sales", "Misc")]
    assert one(q).keys == ("Billing", "Ops", "Sales", "Misc")


def test_score_levels_as_strings_objects_arrays_and_numbers() -> None:
    q = {"type": "score", "instructions": "How?", "criteria": ["calm", {"b": 1, "a": 2}, ["x", "y"], 3, 2.5]}
    head = "Context:\nS\n\nQuestion: How?\nProposed answer: "
    options = ["calm", '{"a": 2, "b": 1}', '["x", "y"]', "3", "2.5"]
    assert texts(q) == [head + o + SUFFIX_OPTION for o in options]
    assert one(q).keys == ("0", "1", "2", "3", "4")


# ------------------------------------------------------------------ validation

@pytest.mark.parametrize("model", [None, *MODEL_ALIASES, "openjev-repro/qwen3_5-fixture-tiny"])
def test_accepted_model_names(model) -> None:
    body = {"state": "S", "questions": {"q": {"type": "noul", "instructions": "?"}}}
    if model is not None:
        body["model"] = model
    assert parse_request(body, MODELS)[0] == (model or "open-jev")
    assert parse_request({**body, "model": None}, MODELS)[0] == "open-jev"


def test_checkpoint_aliases_follow_the_loaded_base_model() -> None:
    assert accepted_models("Qwen/Qwen3.8-27B") == ("open-jev", "jev-latest", "Qwen/Qwen3.8-27B", "open-jev-27b-v1.1")
    assert "open-jev-27b-v1.1" not in MODELS and "Qwen/Qwen3.8-27B" not in MODELS
    body = {"model": "open-jev-27b-v1.1", **q_body({"type": "noul", "instructions": "?"})}
    assert parse_request(body, accepted_models("Qwen/Qwen3.8-27B"))[0] == "open-jev-27b-v1.1"
    assert refused(body).field == "model"
    assert refused({**body, "model": 7}).field == "model"


@pytest.mark.parametrize("question, field", [
    ({"type": "noul"}, "questions.q.instructions"),
    ({"type": "noul", "instructions": None}, "questions.q.instructions"),
    ({"type": "noul", "instructions": " \n\t "}, "questions.q.instructions"),
    ({"type": "noul", "instructions": ""}, "questions.q.instructions"),
    ({"type": "noul", "instructions": 3}, "questions.q.instructions"),
    ({"type": "noul", "instructions": "?", "criteria": {}}, "questions.q.criteria"),
    ({"type": "noul", "instructions": "?", "criteria": {"true": None, "false": None}}, "questions.q.criteria"),
    ({"type": "noul", "instructions": "?", "criteria": {"maybe": "x"}}, "questions.q.criteria"),
    ({"type": "noul", "instructions": "?", "criteria": "yes"}, "questions.q.criteria"),
    ({"type": "noul", "instructions": "?", "criteria": {"true": 3}}, "questions.q.criteria.true"),
    ({"type": "choice", "instructions": "?", "criteria": {"a": 1}}, "questions.q.criteria.a"),
    ({"type": "choice", "instructions": "?", "criteria": {"a": True}}, "questions.q.criteria.a"),
    ({"type": "choice", "instructions": "?", "criteria": ["a", "b"]}, "questions.q.criteria"),
    ({"type": "choice", "instructions": "?", "criteria": {}}, "questions.q.criteria"),
    ({"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(256)}}, "questions.q.criteria"),
    ({"type": "score", "instructions": "?", "criteria": ["a"]}, "questions.q.criteria"),
    ({"type": "score", "instructions": "?", "criteria": [str(i) for i in range(11)]}, "questions.q.criteria"),
    ({"type": "score", "instructions": "?", "criteria": {"0": "a", "1": "b"}}, "questions.q.criteria"),
    ({"type": "score", "instructions": "?", "criteria": ["a", None]}, "questions.q.criteria[1]"),
    ({"type": "score", "instructions": "?", "criteria": ["a", True]}, "questions.q.criteria[1]"),
    ({"type": "score", "instructions": "?", "criteria": ["a", math.nan]}, "questions.q.criteria[1]"),
    ({"type": "score", "instructions": "?", "criteria": ["a", math.inf]}, "questions.q.criteria[1]"),
    ({"type": "boolean", "instructions": "?"}, "questions.q.type"),
])
def test_invalid_questions_name_the_field(question: dict, field: str) -> None:
    assert refused(q_body(question)).field == field


def test_choice_with_one_to_255_options_and_null_descriptions() -> None:
    for n in (1, 2, 255):
        q = one({"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(n)}})
        assert len(q.keys) == n and q.descriptions == (None,) * n


def test_question_limit_is_4096() -> None:
    noul = {"type": "noul", "instructions": "?"}
    assert len(parse_request({"state": "S", "questions": {f"q{i}": noul for i in range(4096)}}, MODELS)[2]) == 4096
    error = refused({"state": "S", "questions": {f"q{i}": noul for i in range(4097)}})
    assert error.field == "questions" and "4096" in str(error)


def test_candidate_limit_is_65536() -> None:
    choice = {"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(255)}}
    noul = {"type": "noul", "instructions": "?"}
    questions = {f"c{i}": choice for i in range(257)}          # 65535 candidates
    assert len(parse_request({"state": "S", "questions": {**questions, "n0": noul}}, MODELS)[2]) == 258
    error = refused({"state": "S", "questions": {**questions, "n0": noul, "n1": noul}})
    assert error.field == "questions" and "65536 candidate sequences" in str(error) and "65537" in str(error)


# ------------------------------------------------------------------ answers

def test_noul_is_the_sigmoid_of_s_over_t_bit_for_bit() -> None:
    q = one({"type": "noul", "instructions": "?"})
    for s in (-7.25, -1e-3, 0.0, 0.3, 4.0, 60.0):
        x = s / 2.5
        sigmoid = 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
        assert answer(q, [s], 2.5) == {"type": "noul", "noul": sigmoid}


def test_softmax_subtracts_the_maximum_before_dividing() -> None:
    logits, t = [1.0, 3.0, 2.0], 2.5343690298472983
    exps = [math.exp((s - 3.0) / t) for s in logits]
    assert softmax(logits, t) == [e / sum(exps) for e in exps]
    assert softmax([1000.0, 999.0], 1.0)[0] == pytest.approx(1 / (1 + math.exp(-1)))  # no overflow


def test_choice_answer_keys_first_maximum_and_confidence() -> None:
    q = one({"type": "choice", "instructions": "?", "criteria": {"b": None, "a": "x", "c": None}})
    got = answer(q, [0.0, 2.0, 2.0], 1.0)                 # a tie between "a" and "c": the first wins
    probs = softmax([0.0, 2.0, 2.0], 1.0)
    assert got == {"type": "choice", "choice": "a", "probabilities": {"b": probs[0], "a": probs[1], "c": probs[2]},
                   "confidence": (probs[1] - 1 / 3) / (1 - 1 / 3)}
    single = one({"type": "choice", "instructions": "?", "criteria": {"only": None}})
    assert answer(single, [-3.0], 1.0) == {"type": "choice", "choice": "only", "probabilities": {"only": 1.0},
                                           "confidence": 1.0}


def test_score_answer_expectation_confidence_and_legend() -> None:
    levels = ["calm", {"label": "cross"}, 7, ["very", "angry"], "furious"]
    q = one({"type": "score", "instructions": "?", "criteria": levels})
    logits = [0.1, 1.5, 0.7, -0.4, 0.2]
    p = softmax(logits, 1.0)
    mode = 1
    u = (2 + 1 + 0 + 1 + 2) / 5                     # mean |i - (n-1)/2|
    got = answer(q, logits, 1.0)
    assert got == {"type": "score", "score": sum(i * pi for i, pi in enumerate(p)),   # sum i*p_i, not the levels
                   "probabilities": {str(i): pi for i, pi in enumerate(p)},
                   "confidence": max(0.0, 1 - sum(abs(i - mode) * pi for i, pi in enumerate(p)) / u),
                   "legend": {"0": "calm", "1": {"label": "cross"}, "2": 7, "3": ["very", "angry"], "4": "furious"}}
    assert 0.0 < got["confidence"] < 1.0
    flat = answer(one({"type": "score", "instructions": "?", "criteria": ["a", "b", "c"]}), [0.0, 0.0, 0.0], 1.0)
    assert flat["confidence"] == 0.0 and flat["score"] == pytest.approx(1.0)  # uniform: no confidence left

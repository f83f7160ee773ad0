"""From the head's logits to the answers of the /v1/systemone contract (facts file).

Probabilities are a softmax of logit / T over a question's candidates in float64, the maximum
subtracted first: p_i = exp((s_i - max) / T) / sum_j exp((s_j - max) / T). A noul question has
the two logits [0, s], so its answer is p_true = sigmoid(s / T).

    noul    {"type": "noul", "noul": p_true}
    choice  {"type", "choice": the first most probable option, "probabilities": {name: p},
             "confidence": (p_mode - 1/n) / (1 - 1/n), 1.0 when n = 1}
    score   {"type", "score": sum_i i * p_i, "probabilities": {"0": p_0, ...},
             "confidence": max(0, 1 - sum_i |i - mode| * p_i / U), U = mean_i |i - (n-1)/2|,
             "legend": {"0": level 0 as given, ...}}
"""

from __future__ import annotations

import math
from typing import Any

from .prompts import Question

__all__ = [
    "answer",
    "softmax",
]


def softmax(logits: list[float], temperature: float) -> list[float]:
    """exp((s_i - max) / T), normalised; float64."""
    top = max(logits)
    exps = [math.exp((s - top) / temperature) for s in logits]
    total = sum(exps)
    return [e / total for e in exps]


def answer(question: Question, logits: list[float], temperature: float) -> dict[str, Any]:
    """The answer to one question from the logits of its candidates, in answer-key order."""
    if question.type == "noul":
        return {"type": "noul", "noul": softmax([0.0, logits[0]], temperature)[1]}
    probs = softmax(logits, temperature)
    mode = max(range(len(probs)), key=probs.__getitem__)  # the first maximum: a tie goes to the earlier candidate
    probabilities = dict(zip(question.keys, probs, strict=True))
    n = len(probs)
    if question.type == "choice":
        confidence = 1.0 if n == 1 else (probs[mode] - 1.0 / n) / (1.0 - 1.0 / n)
        return {"type": "choice", "choice": question.keys[mode], "probabilities": probabilities,
                "confidence": confidence}
    distance = sum(abs(i - mode) * p for i, p in enumerate(probs))
    center = (n - 1) / 2.0
    uniform = sum(abs(i - center) for i in range(n)) / n
    return {"type": "score", "score": sum(i * p for i, p in enumerate(probs)), "probabilities": probabilities,
            "confidence": max(0.0, 1.0 - distance / uniform),
            "legend": dict(zip(question.keys, question.levels, strict=True))}

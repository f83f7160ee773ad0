"""Ask a /v1/systemone server through the official client, typesafe-sdk, and print what it parsed.

Runs under the peer environment's interpreter (scripts/peers.sh jevcompat), never under ours:
    .cache/peers/jevcompat/bin/python tests/peers/sdk_client.py http://127.0.0.1:8791
stdout is one JSON object: the SDK's parsed answers (floats exactly as parsed), model and usage,
the models the SDK lists, and the request it sent (tests/test_conformance.py replays it).
A parse failure is the SDK's exception, exit 1.
"""

from __future__ import annotations

import json
import sys

from typesafe_sdk import Choice, Noul, Score, TypeSafeClient

STATE = {"ticket": "I was charged twice for my March invoice and want my money back.", "plan": "pro"}
QUESTIONS = {
    "refund": Noul(instructions="Does the customer want money back?",
                   criteria={"true": "a refund or chargeback", "false": "anything else"}),
    "one-sided": Noul(instructions={"task": "Is the customer angry?"}, criteria={"true": "threats or insults"}),
    "team": Choice(instructions="Which team handles this?",
                   criteria={"Billing": "payments, invoices, refunds", "Technical": None,
                             "Sales": {"owns": ["pricing", "upgrades"]}}),
    "anger": Score(instructions="How frustrated is the customer?",
                   criteria=["calm", {"label": "annoyed"}, ["very", "angry"]]),
}


def main(url: str) -> int:
    with TypeSafeClient(api_key="no-key", base_url=url, timeout=120) as client:
        result = client.system_one(state=STATE, questions=QUESTIONS, model="jev-latest")
        listed = client.models.list()
    out = {
        "model": result.model,
        "usage": {"input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens},
        "nouls": {k: v.noul for k, v in result.nouls.items()},
        "choices": {k: {"choice": v.choice, "probabilities": dict(v.probabilities), "confidence": v.confidence}
                    for k, v in result.choices.items()},
        "scores": {k: {"score": v.score, "confidence": v.confidence,
                       "probabilities": {str(i): p for i, p in v.probabilities.items()},
                       "legend": {str(i): level for i, level in v.legend.items()}}
                   for k, v in result.scores.items()},
        "models": [m.name for m in listed.models],
        "request": {"model": "jev-latest", "state": STATE,
                    "questions": {k: q.model_dump(mode="json") for k, q in QUESTIONS.items()}},
    }
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

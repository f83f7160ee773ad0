"""Ask a /v1/systemone server through the official client, typesafe-sdk, and print what it parsed.

Runs under the peer environment's interpreter (scripts/peers.sh jevcompat), never under ours:
    .cache/peers/jevcompat/bin/python tests/peers/sdk_client.py http://127.0.0.1:8791 [--key-env VAR] [--refused]
stdout is one JSON object: the SDK's parsed answers (floats exactly as parsed), model and usage,
the models the SDK lists, and the request it sent (tests/test_conformance.py replays it).
A parse failure is the SDK's exception, exit 1. `--key-env VAR`: the API key from that variable
(the SDK sends it as `Authorization: Bearer`). `--refused`: instead, send each question the SDK
builds that upstream's contract refuses, one per request, and print, per question, the request the
SDK sent and the status, error class and message the SDK raised (or the answer, if any).
"""

from __future__ import annotations

import argparse
import json
import os

from typesafe_sdk import Choice, Noul, RetryPolicy, Score, TypeSafeAPIError, TypeSafeClient

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

# Questions the SDK builds (its instructions are optional, its noul criteria sides too) that upstream's
# contract refuses: missing instructions, noul criteria without "true" and "false" descriptions.
REFUSED_UPSTREAM = {
    "choice-without-instructions": Choice(criteria={"Billing": None, "Technical": None}),
    "score-without-instructions": Score(criteria=["calm", "angry"]),
    "noul-criteria-empty": Noul(instructions="Is the customer angry?", criteria={}),
    "noul-criteria-both-null": Noul(instructions="Is the customer angry?", criteria={"true": None, "false": None}),
}


def refused(client: TypeSafeClient) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, question in REFUSED_UPSTREAM.items():
        sent = question.model_dump(mode="json")
        try:
            result = client.system_one(state=STATE, questions={name: question}, model="jev-latest")
            out[name] = {"sent": sent, "status": 200, "answered": str(result)}
        except TypeSafeAPIError as exc:
            out[name] = {"sent": sent, "status": exc.status, "class": type(exc).__name__, "message": str(exc),
                         "body": exc.body}
    return out


def main(url: str, key: str, only_refused: bool) -> int:
    with TypeSafeClient(api_key=key, base_url=url, timeout=120, retry=RetryPolicy(max_retries=0)) as client:
        if only_refused:
            print(json.dumps(refused(client), ensure_ascii=False))
            return 0
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
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--key-env", default=None)
    parser.add_argument("--refused", action="store_true")
    args = parser.parse_args()
    raise SystemExit(main(args.url, os.environ[args.key_env] if args.key_env else "no-key", args.refused))

#!/usr/bin/env python3
"""`--prompt-ids cached` against `cached-parallel`, side by side in one process: time to turn each of the
74 published-length requests' user text into prompt ids (ids checked identical), by token bucket.

Usage: .venv/bin/python scripts/tokenize-side-by-side.py [--rounds 30] [--requests FILE] [--tokenizer DIR]
Rounds alternate the two ways (ABAB...), so drift on the machine falls on both; medians per request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--requests", type=Path, default=REPO / ".cache/demo/requests/h200-74-lengths-upstream.jsonl")
    p.add_argument("--tokenizer", type=Path, default=REPO / ".cache/demo/checkpoint/base")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from transformers import AutoTokenizer

    from openjev_repro.backend.prompts import MODEL_ALIASES, parse_request, render_text
    from openjev_repro.backend.template_ids import TemplateIds

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    ways = {"cached": TemplateIds(tokenizer), "cached-parallel": TemplateIds(tokenizer, parallel=True)}
    print("parallel:", ways["cached-parallel"].parallel_status)
    texts = []
    for line in args.requests.read_text().splitlines():
        task = json.loads(line)
        _, state, questions = parse_request({"model": MODEL_ALIASES[0], "state": task["state"],
                                             "questions": {task["id"]: task["question"]}}, MODEL_ALIASES)
        texts += [render_text(state, q, None) for q in questions]
    ids = {name: [way.ids(t) for t in texts] for name, way in ways.items()}
    assert ids["cached"] == ids["cached-parallel"], "ids differ"
    times: dict[str, list[list[float]]] = {name: [[] for _ in texts] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            for i, text in enumerate(texts):
                t = time.perf_counter_ns()
                way.ids(text)
                times[name][i].append((time.perf_counter_ns() - t) / 1e6)
    med = {name: [statistics.median(ts) for ts in per] for name, per in times.items()}
    tokens = [len(i) for i in ids["cached"]]
    print("| tokens | requests | cached ms (mean of medians) | cached-parallel ms | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for lo, hi in ((0, 500), (500, 2000), (2000, 10**9)):
        sel = [i for i, n in enumerate(tokens) if lo <= n < hi]
        a = statistics.fmean(med["cached"][i] for i in sel)
        b = statistics.fmean(med["cached-parallel"][i] for i in sel)
        print(f"| {lo}-{hi if hi < 10**9 else ''} | {len(sel)} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")
    a, b = statistics.fmean(med["cached"]), statistics.fmean(med["cached-parallel"])
    print(f"| all | {len(texts)} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

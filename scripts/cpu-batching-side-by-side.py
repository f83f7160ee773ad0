#!/usr/bin/env python3
"""Would batching concurrent requests make fast mode faster? (CPU, fixture model, side by side.)

The reference server scores every candidate alone (batch 1, no padding). A batching server
would run the candidates of the requests waiting together in one forward. This script loads the
model once in fast mode and, for groups of G consecutive requests of a request file (G requests
arriving together, as G concurrent clients send them), times in turn, alternating per group:

    alone     every candidate scored as the server scores it now (model.score, batch 1)
    batched   the group's candidates left-padded into one batch, attention mask and positions
              from the mask, one forward, the last position's hidden state through the head

and prints per-request means, the speed-up, and the largest difference of the head's
probability (sigmoid(s / T)) and of the yes-decisions between the two.

Usage (repo root; fixture built as docs/backend.md says, here under .cache/fixture):
    .venv/bin/python scripts/cpu-batching-side-by-side.py --checkpoint .cache/fixture/checkpoint \\
        --requests .cache/fixture/requests/h200-74-lengths-upstream.jsonl --group 4 --passes 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path


def load(checkpoint: Path, threads: int):
    import torch

    from openjev_repro.backend.model import DecisionModel, Settings
    from openjev_repro.backend.package import read_package

    torch.set_num_threads(threads)
    return DecisionModel.from_package(read_package(checkpoint), Settings(mode="fast", device="cpu"))


def candidate_ids(model, requests: list[dict]) -> list[list[int]]:
    from openjev_repro.backend.prompts import parse_request

    out = []
    for task in requests:
        _, state, questions = parse_request({"state": task["state"], "questions": {"q": task["question"]}},
                                            ("open-jev",))
        out.extend(c.ids for c in model.candidates(state, questions))
    return out


def batched_scores(model, group: list[list[int]]) -> list[float]:
    import torch

    width = max(len(ids) for ids in group)
    ids = torch.zeros((len(group), width), dtype=torch.long)
    mask = torch.zeros((len(group), width), dtype=torch.long)
    for row, seq in enumerate(group):
        ids[row, width - len(seq):] = torch.tensor(seq)
        mask[row, width - len(seq):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        hidden = model.backbone(input_ids=ids, attention_mask=mask, position_ids=positions,
                                use_cache=False).last_hidden_state[:, -1, :]
        return [float(v) for v in model.head(hidden.float())[:, 0]]


def time_groups(model, groups: list[list[list[int]]], passes: int) -> tuple[dict, dict]:
    """(per-request seconds of every timed group, the scores of the last pass) for each way;
    pass 0 warms up, untimed; which way goes first alternates per group."""
    times: dict[str, list[float]] = {"alone": [], "batched": []}
    scores: dict[str, list[float]] = {}
    for number in range(passes + 1):
        scores = {"alone": [], "batched": []}
        for index, group in enumerate(groups):
            for way in (("alone", "batched") if index % 2 == 0 else ("batched", "alone")):
                started = time.perf_counter()
                out = [model.score(ids) for ids in group] if way == "alone" else batched_scores(model, group)
                if number:
                    times[way].append((time.perf_counter() - started) / len(group))
                scores[way].extend(out)
    return times, scores


def compare(times: dict, scores: dict, temperature: float) -> dict:
    prob = {way: [1 / (1 + math.exp(-s / temperature)) for s in values] for way, values in scores.items()}
    pairs = list(zip(prob["alone"], prob["batched"], strict=True))
    alone, batched = statistics.fmean(times["alone"]) * 1000, statistics.fmean(times["batched"]) * 1000
    return {"alone_ms_per_request": round(alone, 3), "batched_ms_per_request": round(batched, 3),
            "speedup": round(alone / batched, 3), "max_abs_dp": max(abs(a - b) for a, b in pairs),
            "bit_identical": sum(a == b for a, b in pairs), "decisions_differing": sum((a >= 0.5) != (b >= 0.5) for a, b in pairs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    model = load(args.checkpoint, args.threads)
    requests = [json.loads(line) for line in args.requests.read_text().splitlines()]
    seqs = candidate_ids(model, requests)  # noul: one candidate per request
    groups = [seqs[i:i + args.group] for i in range(0, len(seqs), args.group)]
    times, scores = time_groups(model, groups, args.passes)
    print(json.dumps({"requests": len(seqs), "group": args.group, "passes": args.passes, "threads": args.threads,
                      **compare(times, scores, model.temperature)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Seeded random init and the weights fingerprint, across real backend processes (CPU, fixture config).

The bug these tests pin down: PEFT drew lora_A from the global RNG, so two processes with the same
--seed (and raw vs fast in one study) ran different weights. Each backend here is its own process.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from openjev_repro.backend.fingerprint import weights_fingerprint

pytestmark = pytest.mark.slow

REQUESTS = 6


def _random_init(start_server, checkpoint: Path, seed: int, mode: str, hash_seed: str):
    base = checkpoint / "base"
    # A different PYTHONHASHSEED per process: set and dict orders inside libraries must not matter.
    return start_server(["--random-init", str(base / "config.json"), "--seed", str(seed), "--tokenizer", str(base),
                         "--mode", mode, "--device", "cpu"], {"PYTHONHASHSEED": hash_seed})


@pytest.fixture(scope="module")
def servers(start_server, fixture_checkpoint: Path) -> dict:
    specs = {"a": (3, "raw", "1"), "b": (3, "raw", "2"), "other": (4, "raw", "1"), "fast": (3, "fast", "3")}
    started = {key: _random_init(start_server, fixture_checkpoint, *spec) for key, spec in specs.items()}
    health = {key: server.wait_ready() for key, server in started.items()}
    yield {key: (server, health[key]) for key, server in started.items()}
    for server in started.values():
        server.stop()


def _probabilities(server, requests: Path) -> list[float]:
    out = []
    for line in requests.read_text().splitlines()[:REQUESTS]:
        task = json.loads(line)
        body = {"model": "open-jev", "state": task["state"], "questions": {"q": task["question"]}}
        response = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60)
        assert response.status_code == 200, response.text
        out.append(response.json()["answers"]["q"]["noul"])
    return out


def test_same_seed_in_two_processes_gives_the_same_weights_and_bit_identical_probabilities(
        servers, fixture_root: Path) -> None:
    (a, health_a), (b, health_b) = servers["a"], servers["b"]
    assert health_a["weights_fingerprint"].startswith("wfp1:")
    assert health_a["weights_fingerprint_scope"] == "unmerged"
    assert health_a["weights_fingerprint"] == health_b["weights_fingerprint"]
    requests = fixture_root / "requests" / "demo-noul.jsonl"
    first, second = _probabilities(a, requests), _probabilities(b, requests)
    assert len(first) == REQUESTS and first == second   # exact float equality, not approx


def test_a_different_seed_gives_a_different_fingerprint(servers) -> None:
    assert servers["a"][1]["weights_fingerprint"] != servers["other"][1]["weights_fingerprint"]


def test_raw_and_fast_from_one_seed_report_the_same_unmerged_weights(servers) -> None:
    raw, fast = servers["a"][1], servers["fast"][1]
    assert fast["weights_fingerprint"] == raw["weights_fingerprint"]
    assert fast["merged_weights_fingerprint"].startswith("wfp1:")
    assert fast["merged_weights_fingerprint"] != fast["weights_fingerprint"]
    assert "merged_weights_fingerprint" not in raw


def test_health_reports_thread_settings(servers) -> None:
    health = servers["a"][1]
    assert health["torch_threads"] == 1   # the test servers start with --threads 1
    assert health["torch_interop_threads"] >= 1 and "OMP_NUM_THREADS" in health["thread_env"]


def test_checkpoint_load_reports_a_fingerprint(start_server, fixture_checkpoint: Path) -> None:
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--torch-threads", "2"])
    health = server.wait_ready()
    server.stop()
    assert health["weights_fingerprint"].startswith("wfp1:") and health["torch_threads"] == 2


# ------------------------------------------------------------------ the fingerprint itself (in process)

def test_fingerprint_sees_every_word_name_dtype_and_shape() -> None:
    import torch

    generator = torch.Generator().manual_seed(0)
    weights = {"w": torch.randn(3, 1000, generator=generator).to(torch.bfloat16),
               "v": torch.randn(7, generator=generator), "flag": torch.tensor([True, False])}
    base = weights_fingerprint(weights.items()).fingerprint
    assert weights_fingerprint(reversed(list(weights.items()))).fingerprint == base   # canonical order

    def changed(**replace) -> str:
        return weights_fingerprint({**weights, **replace}.items()).fingerprint

    one_word = weights["w"].clone()
    one_word.view(-1).view(torch.int16)[2345] += 1        # the smallest change: one bit of one BF16 value
    swapped = weights["w"].clone()
    swapped.view(-1)[[10, 11]] = swapped.view(-1)[[11, 10]]
    assert swapped.view(-1)[10] != swapped.view(-1)[11]
    assert changed(w=one_word) != base
    assert changed(w=swapped) != base
    assert changed(w=weights["w"].reshape(1000, 3)) != base
    assert changed(v=weights["v"].double()) != base
    assert changed(flag=torch.tensor([True, True])) != base
    renamed = {("u" if k == "v" else k): t for k, t in weights.items()}
    assert weights_fingerprint(renamed.items()).fingerprint != base

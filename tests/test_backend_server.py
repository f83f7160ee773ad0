"""Contract tests against the reference backend started as a real subprocess on a loopback port."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from openjev_repro.evidence.recipe import load_recipe

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

FAIL_MARK = "PLEASE-FAIL-HERE"
SLOW_MARK = "PLEASE-BE-SLOW"
FAULTY = str(Path(__file__).parent / "servers" / "faulty_backend.py")  # the backend with injected faults
FAULTS = [FAULTY, "--fail-on", FAIL_MARK, "--slow-on", SLOW_MARK, "--slow-seconds", "3"]
METADATA = {"method", "temperature", "candidate_sequences", "inference_seconds", "prefix_cache", "checkpoint_sha256",
            "base_revision", "max_length", "backbone_parameter_dtypes", "code_commit", "mode", "implementations",
            "device"}


@pytest.fixture(scope="module")
def raw(start_server, fixture_checkpoint: Path):
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "4096"])
    server.wait_ready()
    return server


@pytest.fixture(scope="module")
def hidden(start_server, fixture_checkpoint: Path):
    """Raw mode with the renderer of the committed H200 recipes."""
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "4096",
                           "--prompt-format", "criteria-hidden"])
    server.wait_ready()
    return server


@pytest.fixture(scope="module")
def faulty(start_server, fixture_checkpoint: Path):
    """The same backend through its test seam, with faults injected on marked states."""
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "4096"],
                          program=FAULTS)
    server.wait_ready()
    return server


@pytest.fixture(scope="module")
def fast(start_server, fixture_checkpoint: Path):
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "fast", "--max-length", "4096"])
    server.wait_ready()
    return server


def post(server, body, path: str = "/v1/systemone", **kw) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}{path}", content=content, headers={"Content-Type": "application/json"},
                      timeout=60, **kw)


def noul(state="The meeting is on Monday.", instructions="Is the meeting on Monday?", **extra):
    return {"model": "open-jev", "state": state,
            "questions": {"q": {"type": "noul", "instructions": instructions, **extra}}}


def tasks(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ happy paths

def test_health_models_and_raw_implementations(raw) -> None:
    health = httpx.get(f"{raw.url}/health").json()
    assert health["status"] == "ready" and health["model"] == "open-jev" and health["method"]
    impl = health["implementations"]
    assert impl["chunk_gated_delta_rule"] == ["torch_chunk_gated_delta_rule"]
    assert impl["causal_conv1d_fn"] == ["torch (F.conv1d)"] and impl["norm"] == ["Qwen3_5RMSNormGated"]
    assert impl["full_attention"] == "sdpa" and impl["linear_attention_layers"] == 3
    assert health["lora"] == "unmerged (PEFT)" and health["lora_modules"] == 10 and health["mode"] == "raw"
    assert health["prompt_format"] == "upstream"
    listed = httpx.get(f"{raw.url}/v1/models").json()
    names = ["open-jev", "jev-latest", "openjev-repro/qwen3_5-fixture-tiny"]
    assert [m["id"] for m in listed["data"]] == names                  # the OpenAI shape
    assert [m["name"] for m in listed["models"]] == names              # the official SDK's shape
    assert all(isinstance(m["description"], str) and m["release_date"] == "" for m in listed["models"])


@pytest.mark.parametrize("path", ["/v1/systemone", "/v1/inference", "/api/jev"])
def test_noul_on_every_alias(raw, path: str) -> None:
    response = post(raw, noul(), path)
    assert response.status_code == 200
    data = response.json()
    answer = data["answers"]["q"]
    assert answer["type"] == "noul" and 0.0 < answer["noul"] < 1.0
    assert data["usage"]["output_tokens"] == 0 and data["usage"]["input_tokens"] > 20
    assert METADATA <= set(data["metadata"])
    meta = data["metadata"]
    assert meta["candidate_sequences"] == 1 and meta["mode"] == "raw" and meta["device"] == "cpu"
    assert meta["backbone_parameter_dtypes"] == ["float32"] and meta["prefix_cache"] is False
    assert meta["temperature"] == 2.5343690298472983 and meta["code_commit"] == "test"


def test_choice_and_score(raw) -> None:
    body = {"model": "jev-latest", "state": {"cart": [1, 2], "user": "ann"}, "questions": {
        "c": {"type": "choice", "instructions": "Which colour?", "criteria": {"red": "warm", "blue": None, "green": ""}},
        "s": {"type": "score", "instructions": {"ask": "How full is the cart?"}, "criteria": [1, ["a"], "three", {"n": 4}]}}}
    data = post(raw, body).json()
    choice, score = data["answers"]["c"], data["answers"]["s"]
    assert list(choice["probabilities"]) == ["red", "blue", "green"]
    assert abs(sum(choice["probabilities"].values()) - 1) < 1e-9
    assert choice["choice"] == max(choice["probabilities"], key=choice["probabilities"].get)
    p_top = max(choice["probabilities"].values())
    assert choice["confidence"] == pytest.approx((p_top - 1 / 3) / (1 - 1 / 3))
    assert list(score["probabilities"]) == ["0", "1", "2", "3"] and abs(sum(score["probabilities"].values()) - 1) < 1e-9
    assert score["score"] == pytest.approx(sum(i * p for i, p in enumerate(score["probabilities"].values())))
    assert score["legend"] == {"0": 1, "1": ["a"], "2": "three", "3": {"n": 4}}
    assert 0 <= score["confidence"] <= 1
    meta = data["metadata"]
    assert meta["candidate_sequences"] == 7 and len(meta["candidate_tokens"]) == 7
    assert data["usage"]["input_tokens"] == sum(meta["candidate_tokens"])
    assert data["model"] == "jev-latest"


def test_a_null_or_absent_model_is_the_default(raw) -> None:
    body = noul()
    for shaped in ({**body, "model": None}, {k: v for k, v in body.items() if k != "model"}):
        response = post(raw, shaped)
        assert response.status_code == 200 and response.json()["model"] == "open-jev"


def test_question_ids_are_not_shown_to_the_model(raw) -> None:
    a = post(raw, noul()).json()
    b = post(raw, {**noul(), "questions": {"another-id": noul()["questions"]["q"]}}).json()
    assert a["answers"]["q"]["noul"] == b["answers"]["another-id"]["noul"]


def test_input_tokens_match_the_lengths_file(raw, hidden, fixture_root: Path) -> None:
    """Each lengths file renders to the published counts under the prompt format it was made for."""
    for server, name in ((raw, "h200-74-lengths-upstream.jsonl"), (hidden, "h200-74-lengths.jsonl")):
        for task in tasks(fixture_root / "requests" / name)[:40:7]:
            body = {"model": "open-jev", "state": task["state"], "questions": {"q": task["question"]}}
            assert post(server, body).json()["usage"]["input_tokens"] == int(task["id"].rsplit("-", 1)[1])


def test_criteria_reach_the_model(raw, hidden) -> None:
    """Upstream's format shows noul criteria and choice descriptions (more tokens, other answers);
    criteria-hidden renders as this backend did before 2026-12-01."""
    criteria = {"true": "the meeting is on Monday", "false": "it is on another day"}
    bare, shown = post(raw, noul()).json(), post(raw, noul(criteria=criteria)).json()
    assert shown["usage"]["input_tokens"] > bare["usage"]["input_tokens"]
    assert shown["answers"]["q"]["noul"] != bare["answers"]["q"]["noul"]
    assert shown["metadata"]["prompt_format"] == "upstream"
    hidden_bare, hidden_shown = post(hidden, noul()).json(), post(hidden, noul(criteria=criteria)).json()
    assert hidden_shown["answers"] == hidden_bare["answers"] == bare["answers"]
    assert hidden_shown["usage"] == hidden_bare["usage"] == bare["usage"]
    assert hidden_shown["metadata"]["prompt_format"] == "criteria-hidden"
    for kind, value in (("true", "x"), ("false", "y")):  # one-sided criteria: our extension of upstream
        assert post(raw, noul(criteria={kind: value})).status_code == 200


# ------------------------------------------------------------------ bad input

def test_not_json_is_415(raw) -> None:
    response = post(raw, b"state=hello")
    assert response.status_code == 415 and "not JSON" in response.json()["error"]["message"]


def test_body_over_4_mib_is_413(raw) -> None:
    response = post(raw, b"{" + b" " * (4 * 1024 * 1024) + b"}")
    assert response.status_code == 413 and "4 MiB" in response.json()["error"]["message"]
    assert post(raw, noul()).status_code == 200  # a fresh connection is served normally


@pytest.mark.parametrize("body, field", [
    ({**noul(), "model": "gpt-4"}, "model"),
    ({**noul(), "model": "open-jev-27b-v1.1"}, "model"),   # the 27B checkpoint's alias: not what is loaded
    ({"questions": noul()["questions"]}, "state"),
    ({**noul(), "state": 5}, "state"),
    ({"state": "x"}, "questions"),
    ({"state": "x", "questions": []}, "questions"),
    ({"state": "x", "questions": {"q": {"type": "yesno", "instructions": "?"}}}, "questions.q.type"),
    ({"state": "x", "questions": {"q": {"type": "noul", "instructions": 3}}}, "questions.q.instructions"),
    ({"state": "x", "questions": {"q": {"type": "noul", "instructions": "  "}}}, "questions.q.instructions"),
    ({"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {}}}}, "questions.q.criteria"),
    ({"state": "x", "questions": {"q": {"type": "score", "instructions": "?", "criteria": [1]}}}, "questions.q.criteria"),
    ({"state": "x", "questions": {"q": {"type": "score", "instructions": "?", "criteria": list(range(11))}}},
     "questions.q.criteria"),
    ({"state": "x", "questions": {"q": {"type": "choice", "instructions": "?",
                                        "criteria": {f"o{i}": "" for i in range(256)}}}}, "questions.q.criteria"),
    ({"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"a": 5}}}},
     "questions.q.criteria.a"),
    ({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?", "criteria": {"maybe": "x"}}}},
     "questions.q.criteria"),
])
def test_validation_errors_name_the_field(raw, body, field: str) -> None:
    response = post(raw, body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_over_length_candidate_is_422_before_inference(raw) -> None:
    served = httpx.get(f"{raw.url}/health").json()["served"]
    response = post(raw, noul(state=" ".join(["the"] * 5000)))
    assert response.status_code == 422 and "over the server's max length 4096" in response.json()["error"]["message"]
    assert httpx.get(f"{raw.url}/health").json()["served"] == served


def test_inference_exception_is_500_and_server_keeps_serving(faulty) -> None:
    response = post(faulty, noul(state=f"log {FAIL_MARK} here"))
    assert response.status_code == 500 and "inference failed" in response.json()["error"]["message"]
    assert post(faulty, noul()).status_code == 200


def test_health_answers_while_an_inference_runs(faulty) -> None:
    # "While" by the requests' own clocks: /health reports busy and its answer arrives before the slow
    # inference's does (no sleep guessing when the inference has begun).
    result: dict = {}

    def slow() -> None:
        result["r"] = post(faulty, noul(state=f"{SLOW_MARK} now"))
        result["ended"] = time.monotonic()

    worker = threading.Thread(target=slow)
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and worker.is_alive():
        health = httpx.get(f"{faulty.url}/health", timeout=10).json()
        answered = time.monotonic()
        if health["busy"]:
            break
        time.sleep(0.01)
    worker.join()
    assert health["busy"] is True and answered < result["ended"]
    assert result["r"].status_code == 200


def test_unknown_path_is_404(raw) -> None:
    assert httpx.get(f"{raw.url}/nope").status_code == 404
    assert post(raw, noul(), "/v2/nope").status_code == 404


# ------------------------------------------------------------------ modes agree, results repeat

def test_same_request_twice_is_bit_identical(raw, fast) -> None:
    for server in (raw, fast):
        first, second = post(server, noul()).json(), post(server, noul()).json()
        assert first["answers"] == second["answers"]


def test_raw_and_fast_agree(raw, fast, fixture_root: Path) -> None:
    health = httpx.get(f"{fast.url}/health").json()
    assert health["lora"] == "merged" and health["mode"] == "fast"
    cases = tasks(fixture_root / "requests" / "demo-noul-upstream.jsonl") + \
        tasks(fixture_root / "requests" / "h200-74-lengths-upstream.jsonl")

    def answers(server) -> list[float]:
        return [post(server, {"model": "open-jev", "state": task["state"], "questions": {"q": task["question"]}}
                     ).json()["answers"]["q"]["noul"] for task in cases]

    with ThreadPoolExecutor(max_workers=2) as pool:  # two server processes: ask both at once
        by_server = list(pool.map(answers, (raw, fast)))
    probs = {task["id"]: pair for task, pair in zip(cases, zip(*by_server, strict=True), strict=True)}
    decisions = {i: [p >= 0.5 for p in pair] for i, pair in probs.items()}
    assert all(a == b for a, b in decisions.values())
    assert max(abs(a - b) for a, b in probs.values()) <= 1e-3
    assert 0 < sum(d[0] for d in decisions.values()) < len(decisions)  # the head's decisions vary


# ------------------------------------------------------------------ start-up

def test_health_is_503_before_ready(start_server, fixture_checkpoint: Path) -> None:
    server = start_server(["--checkpoint", str(fixture_checkpoint)], program=[FAULTY, "--load-delay", "4"])
    server.wait_port()
    before = httpx.get(f"{server.url}/health", timeout=5)
    assert before.status_code == 503 and before.json()["status"] == "loading"
    assert post(server, noul()).status_code == 503
    assert server.wait_ready()["status"] == "ready"
    assert [e["event"] for e in server.events()] == ["listening", "ready"]
    server.stop()
    assert server.proc.returncode == 0


def _refused(start_server, args: list[str]) -> str:
    server = start_server(args)
    assert server.proc.wait(timeout=120) != 0
    return server.log.read_text()


def test_missing_checkpoint_file_refuses_to_start(start_server, fixture_checkpoint: Path, tmp_path: Path) -> None:
    root = shutil.copytree(fixture_checkpoint, tmp_path / "ckpt")
    (root / "adapter" / "adapter_model.safetensors").unlink()
    assert "adapter_model.safetensors is missing" in _refused(start_server, ["--checkpoint", str(root)])


def test_wrong_head_shape_refuses_to_start(start_server, fixture_checkpoint: Path, tmp_path: Path) -> None:
    import torch

    root = shutil.copytree(fixture_checkpoint, tmp_path / "ckpt")
    torch.save({"weight": torch.zeros(2, 128), "bias": torch.zeros(2)}, root / "head.pt")
    assert "head.pt must hold weight of shape (1, 128)" in _refused(start_server, ["--checkpoint", str(root)])


def test_cuda_graphs_on_cpu_are_refused(start_server, fixture_checkpoint: Path) -> None:
    log = _refused(start_server, ["--checkpoint", str(fixture_checkpoint), "--mode", "fast", "--device", "cpu",
                                  "--cuda-graphs", "8"])
    assert "--cuda-graphs needs a CUDA device" in log


def test_random_init_serves(start_server, fixture_checkpoint: Path) -> None:
    base = fixture_checkpoint / "base"
    server = start_server(["--random-init", str(base / "config.json"), "--seed", "3", "--tokenizer", str(base)])
    health = server.wait_ready()
    assert health["lora_modules"] == 10 and health["base_model"] == "random-init:config"
    response = post(server, {**noul(), "model": "random-init:config"})
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["model"] == "random-init:config" and 0 < data["answers"]["q"]["noul"] < 1
    assert data["usage"]["input_tokens"] > 0 and set(METADATA) <= set(data["metadata"])
    meta = data["metadata"]
    assert (meta["base_revision"], meta["checkpoint_sha256"]) == ("seed-3", None)  # says what it serves
    # Random weights at the published model's calibration (docs/backend.md), so a 27B-shape run is comparable.
    published = load_recipe(ROOT / "recipes" / "open-jev-h200-hf-comparison-2026-10-03.yaml")
    assert published.pins.temperature is not None and meta["temperature"] == published.pins.temperature
    server.stop()


def test_port_in_use_is_a_clear_error(start_server, fixture_checkpoint: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = start_server(["--checkpoint", str(fixture_checkpoint), "--port", str(port)])
        assert server.proc.wait(timeout=60) == 2
        assert "cannot bind" in server.log.read_text()

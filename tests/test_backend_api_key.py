"""The reference server's optional API key (issue 41 item 10), against the real server on loopback:
`Authorization: Bearer KEY` on every request but /health, 401 `authentication_error` otherwise,
/health reduced to the contract's fields without the key, and the key never written anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

KEY = "test-key-0123456789abcdef"
ENV = {"OPENJEV_TEST_API_KEY": KEY}
NOUL = {"model": "open-jev", "state": "The meeting is on Monday.",
        "questions": {"q": {"type": "noul", "instructions": "Is the meeting on Monday?"}}}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def keyed(start_server, fixture_checkpoint: Path):
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw", "--max-length", "4096",
                           "--api-key-env", "OPENJEV_TEST_API_KEY"], env=ENV)
    server.wait_ready()  # /health answers without the key
    return server


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("headers", [{}, _bearer("wrong-key"), {"Authorization": KEY}, {"X-Api-Key": KEY}])
def test_a_missing_or_wrong_key_is_401(keyed, headers: dict[str, str]) -> None:
    for response in (httpx.post(f"{keyed.url}/v1/systemone", json=NOUL, headers=headers, timeout=60),
                     httpx.get(f"{keyed.url}/v1/models", headers=headers, timeout=60)):
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        body = response.json()
        assert body["error"]["type"] == body["detail"]["error_type"] == "authentication_error"
        assert body["error"]["message"] == body["detail"]["message"] and KEY not in response.text


def test_the_right_key_is_answered_and_the_connection_kept(keyed) -> None:
    with httpx.Client(headers=_bearer(KEY), timeout=60) as client:
        refused = client.post(f"{keyed.url}/v1/systemone", json=NOUL, headers=_bearer("nope"))
        answered = client.post(f"{keyed.url}/v1/systemone", json=NOUL)
        listed = client.get(f"{keyed.url}/v1/models")
    assert refused.status_code == 401 and answered.status_code == 200 and listed.status_code == 200
    assert 0 < answered.json()["answers"]["q"]["noul"] < 1


def test_health_without_the_key_says_only_what_the_contract_says(keyed) -> None:
    bare = httpx.get(f"{keyed.url}/health", timeout=30).json()
    assert bare == {"status": "ready", "model": "open-jev", "method": bare["method"]}
    full = httpx.get(f"{keyed.url}/health", headers=_bearer(KEY), timeout=30).json()
    assert full["auth"] == "bearer" and "weights_fingerprint" in full and full["status"] == "ready"
    assert KEY not in json.dumps(full)


def test_the_key_is_never_logged(keyed) -> None:
    httpx.post(f"{keyed.url}/v1/systemone", json=NOUL, headers=_bearer("wrong"), timeout=60)
    assert KEY not in keyed.log.read_text()


def _start(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openjev_repro.backend", "--checkpoint", "unused", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **env})


@pytest.mark.parametrize("args, env, says", [
    (["--api-key-env", "OPENJEV_TEST_UNSET_KEY"], {}, "the environment variable OPENJEV_TEST_UNSET_KEY is not set"),
    (["--api-key-env", "OPENJEV_TEST_BAD_KEY"], {"OPENJEV_TEST_BAD_KEY": "two words"}, "from $OPENJEV_TEST_BAD_KEY must"),
    (["--api-key", "bad\tkey-secret"], {}, "from --api-key must be 1 to 512 visible ASCII"),
])
def test_a_bad_key_option_is_one_error_line_without_the_key(args, env, says: str) -> None:
    result = _start(args, env)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and says in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "secret" not in result.stderr and "two words" not in result.stderr


def test_both_key_options_are_refused() -> None:
    result = _start(["--api-key", "a", "--api-key-env", "B"], {})
    assert result.returncode == 2 and "not allowed with argument" in result.stderr

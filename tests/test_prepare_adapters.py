"""Raw-HF launcher: kernel blocking and fallback assertions on tiny Qwen3_5 models, in real subprocesses.

The launcher runs upstream's `jev.server`, which is not installable here; the tests run it around
servers of ours instead (`--server-module`): the reference backend, and `tests/servers/load_pretrained.py`.
FLA and causal-conv1d need CUDA and are absent here, so tests that need them "available" use
named stand-in packages (fake_fla, fake_causal_conv1d) and force the availability checks on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent

TINY = """
from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
config = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
    linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"])
"""


def _py(code: str, tmp: Path, *args: str, extra_path: str = "") -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{ROOT}:{extra_path}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=240, check=False)


SERVERS = ROOT / "tests" / "servers"
# The launcher around a server of ours instead of upstream's jev.server (which is not installable here).
LAUNCHER = ["-m", "openjev_repro.upstream.hf_raw", "--server-module", "openjev_repro.backend"]


def test_launcher_verifies_the_fallback_then_runs_the_server(start_server, fixture_checkpoint):
    """Kernels blocked, the model checked as from_pretrained returns it, then the wrapped server serves
    with every argument the launcher did not take (here our reference backend: 3 linear-attention layers)."""
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw"],
                          program=[*LAUNCHER, "--expect-linear-layers", "3"])
    health = server.wait_ready()
    assert health["implementations"]["chunk_gated_delta_rule"] == ["torch_chunk_gated_delta_rule"]
    body = {"model": "open-jev", "state": "The door is open.", "questions": {"q": {"type": "noul", "instructions": "Open?"}}}
    response = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60)
    assert response.status_code == 200 and 0 < response.json()["answers"]["q"]["noul"] < 1
    log = server.log.read_text()
    verified = log.index('openjev-repro hf_raw: {"verified_linear_attention_layers": 3')
    assert verified < log.index('{"event": "ready"')  # checked before the server said it was ready
    server.stop()
    assert server.proc.returncode == 0


def test_launcher_refuses_wrong_layer_count(start_server, fixture_checkpoint):
    """Our backend reports the refusal as a failed load (exit 1) and never becomes ready."""
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "raw"],
                          program=[*LAUNCHER, "--expect-linear-layers", "48"])
    deadline = time.monotonic() + 180
    while server.proc.poll() is None and time.monotonic() < deadline and "ready" not in _events(server):
        time.sleep(0.2)
    assert "ready" not in _events(server) and server.proc.poll() == 1
    assert "FallbackError: found 3 linear-attention layers, expected 48" in server.log.read_text()


def _events(server) -> list[str]:
    return [e["event"] for e in server.events()]


def test_launcher_exits_3_before_the_wrapped_program_goes_on(fixture_checkpoint, tmp_path):
    """A wrapped program that does not catch the refusal: the launcher says so and exits 3."""
    done = subprocess.run([sys.executable, "-m", "openjev_repro.upstream.hf_raw", "--server-module", "load_pretrained",
                           "--expect-linear-layers", "48", str(fixture_checkpoint / "base")],
                          cwd=tmp_path, env={"PYTHONPATH": f"{ROOT}:{SERVERS}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 3, done.stderr
    assert "refusing to serve: found 3 linear-attention layers, expected 48" in done.stderr
    assert "loaded" not in done.stdout


def _stand_in_kernels(tmp: Path) -> Path:
    base = tmp / "standins"
    (base / "causal_conv1d").mkdir(parents=True)
    (base / "causal_conv1d/__init__.py").write_text(
        "def causal_conv1d_fn(*a, **k): raise RuntimeError('stand-in')\n"
        "def causal_conv1d_update(*a, **k): raise RuntimeError('stand-in')\n")
    return base


def test_blocking_wins_over_available_kernels(tmp_path):
    """With causal-conv1d 'available', blocking keeps the stock convolution; without it, the check fails."""
    base = _stand_in_kernels(tmp_path)
    code = textwrap.dedent("""
    import sys
    import transformers.utils.import_utils as iu
    iu.is_causal_conv1d_available = lambda: True   # as on a host where the kernel is installed
    from openjev_repro.upstream import hf_raw
    if sys.argv[1] == "block":
        hf_raw.block_optional_kernels()
    """) + TINY + textwrap.dedent("""
    model = Qwen3_5ForCausalLM(config)
    try:
        rows = hf_raw.assert_pytorch_fallback(model, 3)
        print("OK", rows[0].conv, rows[0].delta_rule, rows[0].norm)
    except hf_raw.FallbackError as exc:
        print("REFUSED", exc)
    """)
    blocked = _py(code, tmp_path, "block", extra_path=str(base))
    assert blocked.returncode == 0, blocked.stderr
    assert blocked.stdout.strip() == "OK stock torch_chunk_gated_delta_rule Qwen3_5RMSNormGated"
    open_ = _py(code, tmp_path, "open", extra_path=str(base))
    assert open_.returncode == 0, open_.stderr
    assert open_.stdout.startswith("REFUSED 3 linear-attention layers do not use the PyTorch fallback, e.g. "
                                   "{'layer': 'model.layers.0.linear_attn', 'delta_rule': ")


def test_blocking_after_model_import_is_refused(tmp_path):
    code = """
    import transformers.models.qwen3_5.modeling_qwen3_5
    from openjev_repro.upstream import hf_raw
    try:
        hf_raw.block_optional_kernels()
    except hf_raw.FallbackError as exc:
        print("REFUSED", exc)
    """
    done = _py(code, tmp_path)
    assert "REFUSED model modules were imported before kernels were blocked" in done.stdout, done.stderr


def test_adapters_package_is_light():
    """The upstream environment needs only this directory: importing the launcher pulls in no pydantic."""
    done = subprocess.run([sys.executable, "-c", ("import sys, openjev_repro.upstream.hf_raw; "
                           "print(any(m.startswith('pydantic') for m in sys.modules))")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "False", done.stderr

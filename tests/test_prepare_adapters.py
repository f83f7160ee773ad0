"""Raw-HF launcher: kernel blocking and fallback assertions on a tiny Qwen3_5 model, in real subprocesses.

FLA and causal-conv1d need CUDA and are absent here, so tests that need them "available" use
named stand-in packages (fake_fla, fake_causal_conv1d) and force the availability checks on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "model"
    done = _py(TINY + f"Qwen3_5ForCausalLM(config).save_pretrained({str(out)!r})\n", out.parent)
    assert done.returncode == 0, done.stderr
    return out


def _fake_server(tmp: Path) -> Path:
    """A stand-in for upstream `jev.server` (not installable here): loads the checkpoint, then 'binds'."""
    pkg = tmp / "fakejev" / "jev"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "server.py").write_text(textwrap.dedent("""
        import argparse
        from transformers import AutoModelForCausalLM
        p = argparse.ArgumentParser(); p.add_argument("--checkpoint"); p.add_argument("--max-length", type=int)
        a = p.parse_args()
        AutoModelForCausalLM.from_pretrained(a.checkpoint)
        print("SERVING max_length=%d" % a.max_length, flush=True)
    """))
    return tmp / "fakejev"


def test_launcher_verifies_fallback_then_runs_server(tiny_checkpoint, tmp_path):
    path = _fake_server(tmp_path)
    done = _py("from openjev_repro.upstream.hf_raw import main; raise SystemExit(main())", tmp_path,
               "--expect-linear-layers", "3", "--checkpoint", str(tiny_checkpoint), "--max-length", "16384",
               extra_path=str(path))
    assert done.returncode == 0, done.stderr
    assert '"verified_linear_attention_layers": 3' in done.stderr
    assert "SERVING max_length=16384" in done.stdout


def test_launcher_refuses_wrong_layer_count(tiny_checkpoint, tmp_path):
    path = _fake_server(tmp_path)
    done = _py("from openjev_repro.upstream.hf_raw import main; raise SystemExit(main())", tmp_path,
               "--expect-linear-layers", "48", "--checkpoint", str(tiny_checkpoint), "--max-length", "16",
               extra_path=str(path))
    assert done.returncode == 3
    assert "found 3 linear-attention layers, expected 48" in done.stderr and "SERVING" not in done.stdout


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
        print("OK", rows[0]["conv"], rows[0]["delta_rule"], rows[0]["norm"])
    except hf_raw.FallbackError as exc:
        print("REFUSED", exc)
    """)
    blocked = _py(code, tmp_path, "block", extra_path=str(base))
    assert blocked.returncode == 0, blocked.stderr
    assert blocked.stdout.strip() == "OK stock torch_chunk_gated_delta_rule Qwen3_5RMSNormGated"
    open_ = _py(code, tmp_path, "open", extra_path=str(base))
    assert open_.returncode == 0, open_.stderr
    assert open_.stdout.startswith("REFUSED 3 linear-attention layers do not use the PyTorch fallback")


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

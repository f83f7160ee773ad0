"""Inputs that let a foreign server load the fixture checkpoint as it is (recipes/demo-third-party.yaml).

`jev-compatible-server` 0.1.1 (PyPI) reads an Open-Jev checkpoint through its `openjev_scalar_head`
readout: base model and PEFT adapter from local directories, but the head and the temperature
through `huggingface_hub.hf_hub_download(repo, file, revision)`. With no hub reachable, we give it
an offline hub cache holding byte-identical copies of the fixture's `head.pt` and
`temperature.json` under a fixed repository name and commit, and a decision config naming them.
Everything here is a pure function of the fixture's bytes, so the recipe pins it by sha256:

    DIR/peers/jev-compatible-server/decision.json          DECISION_CONFIG of the server
    DIR/peers/hf-cache/models--<org>--<name>/snapshots/<commit>/{head.pt,temperature.json}

The config's adapter path is relative to DIR (the recipe runs the server with `cwd: "{inputs}"`);
the base model is DECISION_MODEL_ID, set by the recipe.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["HUB_COMMIT", "HUB_REPO", "write_peer_inputs"]

HUB_REPO = "openjev-repro/fixture-checkpoint"
# A commit-shaped revision: hf_hub_download takes a 40-hex revision straight from snapshots/, offline.
HUB_COMMIT = hashlib.sha1(b"openjev-repro fixture-v1 head and temperature").hexdigest()
_HUB_FILES = ("head.pt", "temperature.json")


def decision_config(max_length: int = 4096) -> dict[str, Any]:
    """jev-compatible-server's decision config for the fixture (keys as its custom_heads module reads them)."""
    artifact = {"repo": HUB_REPO, "revision": HUB_COMMIT}
    return {
        "model": "open-jev-fixture",
        "decision": {
            "readout": "openjev_scalar_head",
            "device": "cpu",
            "dtype": "float32",
            "batch_size": 1,
            "loader": {"adapter": {"repo": "checkpoint/adapter"}, "attn_implementation": "sdpa"},
            "input": {"template": "unused by openjev_scalar_head", "max_length": max_length,
                      "chat_template": {"add_generation_prompt": True, "enable_thinking": False}},
            "artifacts": {"head": {"kind": "linear", "file": "head.pt", **artifact},
                          "calibration": {"file": "temperature.json", "field": "temperature", **artifact}},
        },
    }


def write_peer_inputs(root: Path) -> list[Path]:
    """Write the peer inputs under root (which holds checkpoint/); return the files written, sorted."""
    root = Path(root)
    checkpoint = root / "checkpoint"
    snapshot = root / "peers" / "hf-cache" / f"models--{HUB_REPO.replace('/', '--')}" / "snapshots" / HUB_COMMIT
    snapshot.mkdir(parents=True, exist_ok=True)
    written = []
    for name in _HUB_FILES:
        shutil.copyfile(checkpoint / name, snapshot / name)  # byte-identical copies, not links
        written.append(snapshot / name)
    config = root / "peers" / "jev-compatible-server" / "decision.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_bytes((json.dumps(decision_config(), indent=2, sort_keys=True) + "\n").encode("utf-8"))
    written.append(config)
    return sorted(written)

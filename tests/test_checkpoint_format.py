"""model.json's format_version goes through evidence.files.check_format (UnsupportedFormat)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openjev_repro.backend.package import read_package
from openjev_repro.errors import UnsupportedFormat


def test_model_json_of_another_format_version_is_unsupported(fixture_checkpoint: Path, tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    shutil.copytree(fixture_checkpoint, root)
    meta = json.loads((root / "model.json").read_text())
    (root / "model.json").write_text(json.dumps(dict(meta, format_version=2)))
    with pytest.raises(UnsupportedFormat, match=r"Checkpoint file .*model\.json: format_version 2 is not a format"):
        read_package(root)
    (root / "model.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "format_version"}))
    assert read_package(root).root == root  # a model.json without the key reads as format 1

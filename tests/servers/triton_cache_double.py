"""A DOUBLE of what a GPU backend leaves in its kernel caches (no GPU here): the study points a backend
at TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR; this wrapper writes files shaped like Triton's cache
(`<hash>/<kernel>.cubin|.json|.autotune.json` and the group file `__grp__<kernel>.json` that lists the
kernel's files by absolute path) and Inductor's (`<2 chars>/<hash>.py` + `.best_config`) for the kernels
named by DOUBLE_KERNELS, each only when absent (as a cache hit writes nothing), then execs the real
backend command given as its arguments. As Triton does, a kernel counts as cached only when its group
file exists and every path it lists exists; otherwise its files and its group file are written again.

    DOUBLE_KERNELS  comma-separated kernel names (default "chunk_fwd,fused_norm")
    DOUBLE_CONFIG   the autotuned choice written for each kernel (default "BT=64,num_warps=4")
    DOUBLE_COMPILED when set, a file to which each kernel compiled (not found cached) appends its name
    DOUBLE_RETIME   when set, each `.autotune.json` is written again with this timing even when present: the
                    same choice, other bytes (what a pinned Triton cache did on a second H200, 2026-12-04)
"""

import hashlib
import json
import os
import sys
from pathlib import Path


def _write_once(path: Path, text: str) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _hit(group: Path) -> bool:
    """Triton's test of a cached kernel: its group file lists its files, and each listed path exists."""
    try:
        children = json.loads(group.read_text())["child_paths"]
    except (OSError, ValueError, KeyError):
        return False
    return all(os.path.exists(path) for path in children.values())


def _choice(config: str) -> dict:
    """A triton.Config as Triton's autotuner writes it: block sizes in `kwargs`, warps beside them."""
    pairs = dict(item.split("=", 1) for item in config.split(",") if "=" in item)
    values = {key: int(value) if value.isdigit() else value for key, value in pairs.items()}
    return {"kwargs": {k: v for k, v in values.items() if not k.startswith("num_")},
            **{k: v for k, v in values.items() if k.startswith("num_")}}


def main() -> None:
    config = os.environ.get("DOUBLE_CONFIG", "BT=64,num_warps=4")
    for kernel in os.environ.get("DOUBLE_KERNELS", "chunk_fwd,fused_norm").split(","):
        key = hashlib.sha256(f"{kernel}:{config}".encode()).hexdigest()
        if os.environ.get("TRITON_CACHE_DIR"):
            entry = Path(os.environ["TRITON_CACHE_DIR"]) / key[:52]
            group = entry / f"__grp__{kernel}.json"
            if not _hit(group):
                if os.environ.get("DOUBLE_COMPILED"):
                    with open(os.environ["DOUBLE_COMPILED"], "a") as log:
                        log.write(f"{kernel}\n")
                entry.mkdir(parents=True, exist_ok=True)
                (entry / f"{kernel}.cubin").write_text(f"double cubin of {kernel}\n")
                (entry / f"{kernel}.json").write_text(json.dumps({"name": kernel, "num_warps": 4}) + "\n")
                group.write_text(json.dumps({"child_paths": {name: str(entry / name)
                                                             for name in (f"{kernel}.cubin", f"{kernel}.json")}}))
            tuned = entry / f"{kernel}.autotune.json"
            timing = float(os.environ.get("DOUBLE_RETIME") or 0.01)
            if os.environ.get("DOUBLE_RETIME") and tuned.exists():
                tuned.unlink()
            _write_once(tuned, json.dumps({"key": [128], "configs_timings": [[_choice(config), [timing]]]}) + "\n")
        if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
            code = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / key[:2] / f"c{key[:40]}.py"
            _write_once(code, f"# double of an Inductor kernel: triton_{kernel}\n")
            _write_once(code.with_suffix(".best_config"),
                        json.dumps({**_choice(config), "triton_cache_hash": key}) + "\n")
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()

"""A DOUBLE of a compiled GPU backend's first inference (no GPU here, and our backend's --compile needs
CUDA): a real torch.compile of a small function on the CPU, so Inductor writes its real cache into
TORCHINDUCTOR_CACHE_DIR (or finds it there: a cache hit writes nothing), then exec of the real backend
command given as the arguments."""

import os
import sys

import torch


@torch.compile
def _gated(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x @ w) * x.pow(2).mean(-1, keepdim=True).add(1e-6).rsqrt()


def main() -> None:
    for rows in (16, 24, 40):  # the second length makes Inductor compile a dynamic-shape kernel too
        _gated(torch.ones(rows, 32), torch.ones(32, 32))
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()

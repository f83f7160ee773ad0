"""A run-time GPU override: rerun a committed recipe on another GPU without editing the recipe.

The recipe's `controls.gpu` stays as committed (its digest unchanged); the override replaces it
for this run only and is recorded next to it, in host.json (`gpu_override`), plan.json and
environment.json, and so in the manifest and the report:

    {"recipe": {"index": 2, "uuid": "GPU-…"} | null,
     "run_time": {"index": 0, "uuid": "GPU-…", "index_from": "override" | "uuid lookup"},
     "source": "cli"}

`source` says who asked: "cli" for `invoke study --gpu-uuid`, another caller (a Slurm task)
passes its own name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import HostError, ReproError
from ..evidence.recipe import Controls, Gpu
from .driver import GpuDriver

__all__ = ["UUID_RE", "GpuOverride"]

UUID_RE = re.compile(r"^GPU-[0-9a-fA-F-]{36}$")


@dataclass(frozen=True)
class GpuOverride:
    uuid: str
    index: int | None = None     # None: looked up from the UUID on this host
    source: str = "cli"

    def __post_init__(self) -> None:
        if not UUID_RE.match(self.uuid):
            raise ReproError(f"GPU override: {self.uuid!r} is not a GPU UUID (GPU- and 36 hex digits and dashes; "
                             "`invoke gpus` lists this host's).")
        if self.index is not None and self.index < 0:
            raise ReproError(f"GPU override: index {self.index} must be >= 0.")
        if not self.source:
            raise ReproError("GPU override: source must name who asked for it (cli, slurm, ...).")

    def resolve(self, driver: GpuDriver) -> Gpu:
        """The GPU this run uses; without an index, the one index on this host that has the UUID."""
        if self.index is not None:
            return Gpu(index=self.index, uuid=self.uuid)
        found = [g.index for g in driver.gpus() if g.uuid == self.uuid]
        if not found:
            raise HostError(f"GPU override: no GPU on this host has UUID {self.uuid} (`invoke gpus` lists them).")
        return Gpu(index=found[0], uuid=self.uuid)

    def apply(self, controls: Controls, gpu: Gpu) -> Controls:
        return controls.model_copy(update={"gpu": gpu})

    def record(self, recipe_gpu: Gpu | None, gpu: Gpu) -> dict[str, Any]:
        return {"recipe": recipe_gpu.model_dump() if recipe_gpu else None,
                "run_time": {**gpu.model_dump(), "index_from": "override" if self.index is not None
                             else "uuid lookup"},
                "source": self.source}

    def declared(self, recipe_gpu: Gpu | None) -> dict[str, Any]:
        """What was asked for, before any host was asked (plan.json, environment.json)."""
        return {"recipe": recipe_gpu.model_dump() if recipe_gpu else None,
                "run_time": {"index": self.index, "uuid": self.uuid}, "source": self.source}

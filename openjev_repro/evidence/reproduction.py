"""A recipe's `reproduction:` section (issue 38): what a rerun of the study must show to reproduce it.

Declared before the first timed request, so margins cannot be chosen after seeing a rerun:

```yaml
reproduction:
  basis: what the numbers below rest on (the spread measured across the hosts run on)
  margins:                      # every backend, unless it overrides a field below
    mean: [0.90, 1.10]          # rerun / original, as a band of ratios
    p50: [0.90, 1.10]
    p95: [0.85, 1.15]           # P95 by the run's quantile rule (JevBench rank)
    decision_flips: 0           # decisions that may differ (0: identical)
    max_probability_delta: 0.0  # largest |p_rerun - p_original| of a paired case
  backends:
    reference-raw:
      basis: raw mode is bound by the CPU launching kernels
      margins: {mean: [0.67, 1.50]}
  must_match: [gpu_model, weights_fingerprint, ...]   # else NOT COMPARABLE (default: MUST_MATCH)
  should_match: [cpu_model, gpu_driver, ...]         # else listed as possible explanations
```

A verdict (`audit/reproduce.py`) takes the original's margins from its pre-registration, else its signed
recipe, else `DEFAULT_REPRODUCTION` (documented in docs/reproduce.md), and names which.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import Field, model_validator

from ..schema import StrictModel

__all__ = [
    "DEFAULT_REPRODUCTION",
    "MUST_MATCH",
    "SHOULD_MATCH",
    "Band",
    "ComparabilityField",
    "Margins",
    "MarginsOverride",
    "Reproduction",
]

# The comparability fields a verdict can read from a run's evidence (audit/reproduce.py reads each).
ComparabilityField = Literal["backends", "gpu_model", "weights_fingerprint", "tokenizer", "requests", "case_order",
                 "prompt_format", "timing_boundary", "quantile_rule", "kernel_caches", "dtype", "implementations",
                 "cpu_model", "gpu_driver", "gpu_power_limit", "gpu_clocks", "packages", "libraries", "autotune",
                 "torch_threads", "project_source", "container_image"]
MUST_MATCH: tuple[ComparabilityField, ...] = ("backends", "gpu_model", "weights_fingerprint", "tokenizer", "requests",
                                  "case_order", "prompt_format", "timing_boundary", "quantile_rule", "kernel_caches")
SHOULD_MATCH: tuple[ComparabilityField, ...] = ("cpu_model", "gpu_driver", "gpu_power_limit", "gpu_clocks", "packages",
                                    "libraries", "autotune", "dtype", "implementations", "torch_threads",
                                    "project_source", "container_image")

Ratio = Annotated[float, Field(gt=0.0, le=1e6, allow_inf_nan=False)]
Band = tuple[Ratio, Ratio]  # [low, high] of rerun / original


def _band_problem(name: str, band: Band | None) -> str | None:
    if band is not None and not band[0] <= 1.0 <= band[1]:
        return f"{name} band {list(band)} must hold 1.0 (low <= 1 <= high)"
    return None


class MarginsOverride(StrictModel):
    """A backend's own margins: each field given replaces the study's."""

    mean: Band | None = None
    p50: Band | None = None
    p95: Band | None = None
    decision_flips: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    max_probability_delta: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _bands_hold_one(self) -> MarginsOverride:
        for name in ("mean", "p50", "p95"):
            problem = _band_problem(name, getattr(self, name))
            if problem:
                raise ValueError(problem)
        return self


class Margins(MarginsOverride):
    """Every margin of one backend (the study's, with the backend's overrides applied)."""

    mean: Band
    p50: Band
    p95: Band
    decision_flips: Annotated[int, Field(ge=0, le=1_000_000)]
    max_probability_delta: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]

    def merged(self, override: MarginsOverride | None) -> Margins:
        if override is None:
            return self
        given = override.model_dump(exclude_none=True)
        return Margins(**{**self.model_dump(), **given})

    def band(self, metric: str) -> Band:
        return {"mean": self.mean, "p50": self.p50, "p95": self.p95}[metric]


class BackendReproduction(StrictModel):
    basis: Annotated[str, Field(max_length=2000)] | None = None
    margins: MarginsOverride = MarginsOverride()


class Reproduction(StrictModel):
    """The `reproduction:` section of a recipe."""

    basis: Annotated[str, Field(min_length=1, max_length=4000)]
    margins: Margins
    backends: dict[str, BackendReproduction] = Field(default_factory=dict)
    must_match: tuple[ComparabilityField, ...] = MUST_MATCH
    should_match: tuple[ComparabilityField, ...] = SHOULD_MATCH

    @model_validator(mode="after")
    def _fields_once(self) -> Reproduction:
        both = set(self.must_match) & set(self.should_match)
        if both:
            raise ValueError(f"{', '.join(sorted(both))} is both must_match and should_match")
        return self

    def margins_of(self, backend: str) -> Margins:
        own = self.backends.get(backend)
        return self.margins.merged(own.margins if own else None)

    def to_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")

    def digest(self) -> str:
        """sha256 of the canonical JSON of the section: the policy a verdict names."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def check_backends(self, names: list[str]) -> None:
        """A backend named here must be one of the recipe's (a typo would silently keep the study's margins)."""
        unknown = sorted(set(self.backends) - set(names))
        if unknown:
            raise ValueError(f"reproduction.backends names {', '.join(unknown)}, not a backend of this recipe")


# The documented defaults (docs/reproduce.md, "Margins"): used for an original that declares none (every run
# signed before issue 38). They are the widest host-to-host move measured on any backend of ours: raw mode's
# mean moved 1.347x on one fresh H200 (bound by the CPU launching kernels), fast eager's P50 0.875x
# (results/h200-fast-27b-shape run vs rerun); probabilities within the 27B decision rule's 0.0204.
DEFAULT_REPRODUCTION = Reproduction(
    basis="documented defaults (docs/reproduce.md): the widest host-to-host spread measured on any backend of ours "
          "(raw mean 1.347x on a fresh H200; fast eager P50 0.875x), probabilities within the 27B decision rule's 0.0204",
    margins=Margins(mean=(0.67, 1.5), p50=(0.67, 1.5), p95=(0.67, 1.5), decision_flips=0, max_probability_delta=0.0204),
)

"""The base of every schema we read from a file (recipes, image specs): strict pydantic models.

`StrictModel` refuses unknown keys (a typo in a recipe is an error, never a silently ignored
field) and is frozen (a validated recipe cannot drift while a study runs).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

"""The one placeholder filler of recipe strings: `{name}` replaced by its value, never left by accident.

Recipe commands, env values and cwd carry placeholders: `{python} {host} {port} {inputs} {run}
{backend} {repro}` and `{port.<aux>}` in backend commands (filled by the runner at launch; an aux process's own name
too),
`{python} {inputs} {source.<name>} {download.<name>}` in preparation steps. `fill` replaces
each one in a single pass (a value is never scanned again). A name that is neither given nor
declared `deferred` is a RecipeError naming the placeholder, where it was and the known names;
`deferred` names are left as written on purpose, for a later step to fill (the plan shows
`{port}` before a port is chosen).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from ..errors import RecipeError

__all__ = ["LAUNCH_NAMES", "fill"]

# What the runner fills when it launches a backend (plus {port.<aux>} of the earlier aux processes).
LAUNCH_NAMES = frozenset({"python", "host", "port", "inputs", "run", "backend", "repro"})

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def fill(template: str, values: Mapping[str, str], where: str, *, deferred: Collection[str] = ()) -> str:
    """`template` with every `{name}` replaced by `values[name]`; `deferred` names stay as written.

    An unknown name, or a `{` that opens no placeholder, is a RecipeError that names `where`.
    """
    if "{" in _PLACEHOLDER.sub("", template):
        raise RecipeError(f"{where}: unclosed placeholder in {template!r}.")

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return values[name]
        if name in deferred:
            return match.group(0)
        known = ", ".join("{" + k + "}" for k in sorted({*values, *deferred}))
        hint = " (a {port.<name>} names this or an earlier aux process of the same backend)" if name.startswith("port.") else ""
        raise RecipeError(f"{where}: unknown placeholder {match.group(0)} in {template!r}{hint}; known: {known}.")

    return _PLACEHOLDER.sub(one, template)

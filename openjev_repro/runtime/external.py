"""A backend that is already running, given by URL: reached, never launched, stopped or owned.

The study cannot see such a server's process, so `alive()` is always true (a server that dies
shows as failed requests) and `stop()` leaves it running and records that it was not ours.

Its request headers (an API key, for instance) come from the environment, never from the recipe:
the recipe's `headers_from_env` maps a header name to the name of an environment variable, read
here when the study starts. The recipe, plan.json and the evidence hold the variable's name only;
no error message quotes a value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import ReproError
from .base import ExitRecord, LaunchSpec, RunningBackend

__all__ = ["ExternalBackend", "headers_from_environment"]

_FORBIDDEN = ("\r", "\n", "\0")  # a header value holding one would end the header, or the head


def headers_from_environment(backend: str, names: Mapping[str, str]) -> dict[str, str]:
    """{header: value} for the recipe's {header: VARIABLE}; a variable unset, empty or unfit for a header
    is a ReproError naming the backend, the header and the variable, never the value."""
    headers = {}
    for header, variable in names.items():
        value = os.environ.get(variable, "")
        if not value.strip():
            raise ReproError(f"Backend {backend}: header {header} takes its value from the environment variable "
                             f"{variable}, which is not set or empty; export it before the study (its value is "
                             "never written to the run).")
        if any(c in value for c in _FORBIDDEN) or not value.isprintable():
            raise ReproError(f"Backend {backend}: the environment variable {variable} (header {header}) holds a "
                             "line break or another control character, which an HTTP header cannot carry.")
        headers[header] = value.strip()
    return headers


class ExternalBackend(RunningBackend):
    def __init__(self, spec: LaunchSpec, url: str, headers: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.url = url
        self._headers = dict(headers or {})

    def request_headers(self) -> dict[str, str]:
        return dict(self._headers)

    def alive(self) -> bool:
        return True

    def describe_exit(self) -> str:
        return f"It is a server the study did not start ({self.url}); its process and log are not the study's."

    def log_hint(self) -> str:
        return f"The study did not start {self.url}; check that it is running there."

    def stop(self, grace_s: float) -> ExitRecord:
        return ExitRecord(name=self.spec.name, runtime="external", ident=self.url, exit_status=None,
                          stopped_by_us=False, killed=False, intentional=False, exited=False, launched=False)

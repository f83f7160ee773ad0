"""A backend that is already running, given by URL: reached, never launched, stopped or owned.

The study cannot see such a server's process, so `alive()` is always true (a server that dies
shows as failed requests) and `stop()` leaves it running and records that it was not ours.
"""

from __future__ import annotations

from .base import ExitRecord, LaunchSpec, RunningBackend

__all__ = ["ExternalBackend"]


class ExternalBackend(RunningBackend):
    def __init__(self, spec: LaunchSpec, url: str) -> None:
        self.spec = spec
        self.url = url

    def alive(self) -> bool:
        return True

    def describe_exit(self) -> str:
        return f"It is a server the study did not start ({self.url}); its process and log are not the study's."

    def log_hint(self) -> str:
        return f"The study did not start {self.url}; check that it is running there."

    def stop(self, grace_s: float) -> ExitRecord:
        return ExitRecord(name=self.spec.name, runtime="external", ident=self.url, exit_status=None,
                          stopped_by_us=False, killed=False, intentional=False, exited=False, launched=False)

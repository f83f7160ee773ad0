"""The one exception tree of openjev-repro.

    ReproError                      every error a user can cause or fix
    ├── RecipeError                 a recipe (or claims/tolerances file) is malformed
    ├── InputMismatch               a declared input is missing, changed or undeclared
    ├── BackendError                a backend failed to start, answer or stop
    │   ├── BackendNotReady         /health never said ready before the deadline
    │   └── BackendCrashed          the process exited while we needed it
    ├── ProtocolError               a response broke the HTTP contract
    ├── RunIncomplete               a study stopped before every pass finished
    ├── EvidenceError               a run directory is missing or unreadable
    │   └── UnsupportedFormat       a file we wrote carries a format_version this tool does not read
    ├── VerificationError           a signature, digest or recomputed figure differs
    ├── HostError                   GPU, reservation, NUMA or driver problems
    │   └── ReservationTimeout      the GPU lock was held by someone else too long
    ├── DockerError                 the docker daemon or an image is unusable
    └── CheckpointError             a model checkpoint is incomplete or inconsistent

Messages are sentences that say what went wrong and, where possible, what to do.
Tasks turn a ReproError into `invoke.Exit(message)`: no traceback for user errors.
"""

from __future__ import annotations

__all__ = [
    "BackendCrashed",
    "BackendError",
    "BackendNotReady",
    "CheckpointError",
    "DockerError",
    "EvidenceError",
    "HostError",
    "InputMismatch",
    "ProtocolError",
    "RecipeError",
    "ReproError",
    "ReservationTimeout",
    "RunIncomplete",
    "UnsupportedFormat",
    "VerificationError",
]


class ReproError(Exception):
    """Base of every error a user can cause or fix."""


class RecipeError(ReproError):
    pass


class InputMismatch(ReproError):
    pass


class BackendError(ReproError):
    pass


class BackendNotReady(BackendError):
    pass


class BackendCrashed(BackendError):
    pass


class ProtocolError(ReproError):
    pass


class RunIncomplete(ReproError):
    pass


class EvidenceError(ReproError):
    pass


class UnsupportedFormat(EvidenceError):
    """A file we wrote carries a format_version this tool does not read (a newer tool wrote it)."""


class VerificationError(ReproError):
    pass


class HostError(ReproError):
    pass


class ReservationTimeout(HostError):
    pass


class DockerError(ReproError):
    pass


class CheckpointError(ReproError):
    pass

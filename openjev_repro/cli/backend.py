"""Tasks of the reference backend: build the fixture model and its request files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
from invoke import task

from ..errors import RecipeError
from . import user_errors

__all__ = ["fixture"]


class _Lengths(msgspec.Struct, frozen=True):
    """A --lengths file: the input token count of each request to write."""

    input_tokens: list[Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]]


@task(help={"out": "directory to write (checkpoint/ and requests/ inside it)",
            "lengths": "JSON file with an \"input_tokens\" list (default: the study's 74 published lengths)"})
@user_errors
def fixture(c, out, lengths=None):
    """Write the byte-stable fixture checkpoint and its request files; print their sha256.

    The request files: the demo's and the 74 published lengths', each for both prompt formats."""
    from ..backend.fixture import build_fixture, file_table
    from ..backend.peer_inputs import write_peer_inputs
    from ..backend.synthetic import H200_NOUL_INPUT_TOKENS, write_request_files
    from ..evidence.rundir import guard_output

    root = guard_output(Path(out), directory=True)  # never inside a run, never over a file
    if (root / "checkpoint").exists() and any((root / "checkpoint").iterdir()):
        raise RecipeError(f"{root / 'checkpoint'} already holds files; choose an empty --out directory.")
    counts = H200_NOUL_INPUT_TOKENS
    if lengths:
        try:
            counts = msgspec.json.decode(Path(lengths).read_bytes(), type=_Lengths).input_tokens
        except (OSError, msgspec.DecodeError) as exc:
            raise RecipeError(f"{lengths} is not a JSON file with an \"input_tokens\" list ({exc}).") from None
    files = build_fixture(root / "checkpoint")
    tokenizer = root / "checkpoint" / "base"
    files += write_request_files(tokenizer, root / "requests", counts)
    files += write_peer_inputs(root)  # what a foreign server needs to load this checkpoint offline
    print(f"fixture written to {root} (sha256, bytes, file):")
    for name, size, digest in file_table(root, files):
        print(f"{digest}  {size:>9}  {name}")

"""The reference backend with injected faults: a test double, never part of a study.

    python tests/servers/faulty_backend.py [--fail-on TEXT] [--slow-on TEXT] [--slow-seconds S]
                                           [--load-delay S] BACKEND-ARGUMENTS...

It runs the production backend (`openjev_repro.backend.cli.main`) through its one test seam,
`main(argv, load=...)`: the model is loaded as usual, after --load-delay seconds (the server is
bound and answers 503 "loading" meanwhile), then wrapped so that an inference whose state contains
--fail-on raises (the server answers 500 and keeps serving) and one whose state contains --slow-on
sleeps --slow-seconds inside the inference, holding the model lock. Everything else is the real
backend. The production code has no fault checks: `python -m openjev_repro.backend` loads with
`load_model` and serves the model as loaded.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from openjev_repro.backend.cli import load_model, main


class FaultyModel:
    """A loaded DecisionModel whose answer() fails or sleeps on marked states; all else is delegated."""

    def __init__(self, model: Any, faults: argparse.Namespace) -> None:
        self._model = model
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def answer(self, state: Any, questions: Any, candidates: Any) -> Any:
        text = state if isinstance(state, str) else repr(state)
        if self._faults.fail_on and self._faults.fail_on in text:
            raise RuntimeError("faulty_backend: the state contains the --fail-on text")
        if self._faults.slow_on and self._faults.slow_on in text:
            time.sleep(self._faults.slow_seconds)
        return self._model.answer(state, questions, candidates)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="faulty_backend.py", allow_abbrev=False, add_help=False)
    parser.add_argument("--fail-on", default=None)
    parser.add_argument("--slow-on", default=None)
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    parser.add_argument("--load-delay", type=float, default=0.0)
    faults, backend_argv = parser.parse_known_args(argv)

    def load(args: argparse.Namespace, package: Any) -> FaultyModel:
        time.sleep(faults.load_delay)
        return FaultyModel(load_model(args, package), faults)

    return main(backend_argv, load=load)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

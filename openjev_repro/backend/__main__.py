"""Start the reference backend: `python -m openjev_repro.backend --checkpoint DIR --mode raw --port N`."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())

"""The adversarial suite: each module attacks one promise and asserts the exact outcome.

The builders of real runs live one directory up (audit_kit, studykit); this puts them on the path.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "adversarial"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

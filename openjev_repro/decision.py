"""The decision contract: a probability of "yes", the threshold that makes it a decision, and the
calibration temperature of the published 27B model.

The reference backend decides with these numbers, the pass client records a row's decision with
them, and statistics, comparisons and reports recompute decisions from the rows with them; one
home keeps the backend and the results side from drifting apart without either importing the
other.
"""

from __future__ import annotations

__all__ = ["TEMPERATURE_27B", "YES_THRESHOLD", "decision_of"]

YES_THRESHOLD = 0.5  # a noul decision is "yes" when p_yes >= YES_THRESHOLD
# The published 27B model's temperature.json: the fixture and the seeded random backend use it so
# their probabilities have the published model's spread.
TEMPERATURE_27B = 2.5343690298472983


def decision_of(probability: float) -> str:
    """ "yes" when p_yes >= YES_THRESHOLD, else "no"."""
    return "yes" if probability >= YES_THRESHOLD else "no"

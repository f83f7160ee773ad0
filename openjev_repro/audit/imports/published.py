"""What a published study says about itself: its date, hardware, arms, hypothesis and gates.

The import records these in import.json (`study`, `published_gates`) so that the report of an
imported run states the published study's facts, not the import's: its own date, the GPU it
ran on, the names and descriptions of its arms, and every gate or acceptance criterion with
the outcome it published. Pure functions of the published JSON documents.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["published_gates", "study_facts"]


def _obj(doc: Any, key: str) -> dict[str, Any]:
    """doc[key] when doc is an object and that value is an object too; {} otherwise."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TEXT_LIMIT = 600


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()[:_TEXT_LIMIT]
    return None


def _date(*docs: Any) -> str | None:
    for doc in docs:
        if isinstance(doc, dict):
            for key in ("date_utc", "date"):
                value = doc.get(key)
                if isinstance(value, str) and _DATE.match(value):
                    return value
    return None


def _hardware(*docs: Any) -> list[str]:
    """Hardware lines from plan.json (host, fixed_controls), provenance.json (hardware) or summary controls."""
    out: list[str] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        fixed = _obj(doc, "fixed_controls")
        controls = _obj(doc, "controls")
        host = _obj(doc, "host")
        hardware = _obj(doc, "hardware")
        for source in (fixed, controls, hardware):
            for key in ("hardware_name", "gpu", "gpu_uuid", "compute_capability", "driver", "cuda_toolkit"):
                value = source.get(key)
                if isinstance(value, (str, int)) and not isinstance(value, bool) or isinstance(value, list):
                    out.append(f"{key}: {str(value)[:_TEXT_LIMIT]}")
        if _text(host.get("driver")):
            out.append(f"driver: {_text(host['driver'])}")
    return list(dict.fromkeys(out))


def study_facts(*docs: Any, arms: list[str], descriptions: dict[str, str] | None = None) -> dict[str, Any]:
    """The published study's own facts, from its manifest, plan, provenance and summary documents."""
    hypothesis = variable = None
    for doc in docs:
        if isinstance(doc, dict):
            hypothesis = hypothesis or _text(doc.get("hypothesis"))
            controls = _obj(doc, "controls")
            variable = variable or _text(doc.get("independent_variable")) or _text(controls.get("independent_variable"))
    return {"date": _date(*docs), "hardware": _hardware(*docs), "arms": {a: (descriptions or {}).get(a, "") for a in arms},
            "hypothesis": hypothesis, "independent_variable": variable}


def _criteria(*docs: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        controls = _obj(doc, "controls")
        for acceptance in (doc.get("acceptance"), controls.get("acceptance")):
            if isinstance(acceptance, dict):
                for key, value in acceptance.items():
                    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                        out[str(key)] = f"{key}: {value}"[:_TEXT_LIMIT]
    return out


def _declared_gates(doc: dict) -> list[dict[str, Any]]:
    """Gates a document publishes: `*gate*`/`accepted*` booleans, a `gates` object, `parity.<mode>.pass`."""
    gates = [{"name": str(k), "criterion": None, "outcome": v} for k, v in doc.items()
             if isinstance(v, bool) and ("gate" in str(k) or str(k).startswith("accepted"))]
    gates += [{"name": str(k), "criterion": None, "outcome": v} for k, v in _obj(doc, "gates").items()
              if isinstance(v, bool)]
    for mode, entry in _obj(doc, "parity").items():
        if isinstance(entry, dict) and isinstance(entry.get("pass"), bool):
            criterion = f"max_abs_dp {entry.get('max_abs_dp')} <= tol {entry.get('tol')}"
            gates.append({"name": f"parity {mode}", "criterion": criterion, "outcome": entry["pass"]})
    return gates


# A criterion's measured value under another top-level key (prefill_batching's summary.json
# limits `maximum_probability_or_score_drift` and `request_failures`, and publishes
# `maximum_drift` and `failures`); a key of the criterion's own name is looked up too.
_MEASURED_AS = {"maximum_probability_or_score_drift": ("maximum_drift",), "request_failures": ("failures",)}


def _published_value(name: str, docs: tuple[Any, ...]) -> str | None:
    """`key: value` of the number the documents publish for criterion `name`; None if none."""
    for key in (name, *_MEASURED_AS.get(name, ())):
        for doc in docs:
            value = doc.get(key) if isinstance(doc, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return f"{key}: {value}"
    return None


def _criterion_gate(name: str, criterion: str, docs: tuple[Any, ...]) -> dict[str, Any]:
    """A criterion no gate reports on: no published outcome, and the value they published, if any."""
    value = _published_value(name, docs)
    text = f"{criterion}; published value {value}" if value else criterion
    return {"name": name, "criterion": text[:_TEXT_LIMIT], "outcome": None}


def published_gates(*docs: Any) -> list[dict[str, Any]]:
    """Every gate or acceptance criterion with its published outcome (True, False or None: not published)."""
    gates = [g for doc in docs if isinstance(doc, dict) for g in _declared_gates(doc)]
    named = {g["name"] for g in gates}
    for name, criterion in _criteria(*docs).items():
        match = _gate_of(name, gates)
        if match is not None:
            match["criterion"] = criterion
        elif name not in named:
            gates.append(_criterion_gate(name, criterion, docs))
    return gates


def _gate_of(criterion_name: str, gates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first gate still without a criterion whose name contains, or is contained in, the criterion's."""
    def related(gate: dict[str, Any]) -> bool:
        return criterion_name in gate["name"] or gate["name"] in criterion_name
    return next((g for g in gates if g["criterion"] is None and related(g)), None)

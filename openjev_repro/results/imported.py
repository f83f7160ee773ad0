"""An imported study's published figures and cleanup, checked by the importer, as report lines.

`audit/importer.py` classifies each published figure against the one recomputed from the
imported rows; these functions turn that record (import.json) into the lines `import-evidence`
prints and `report.md` shows. Pure functions of the record: no file access.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["cleanup_line", "figure_counts", "figure_lines"]


def figure_counts(figures: list[dict]) -> dict[str, Any]:
    compared = [f for f in figures if f["status"] != "not_compared"]
    within = [f for f in compared if f["status"] == "within_rounding"]
    return {"compared": len(compared), "exact": sum(f["status"] == "exact" for f in compared),
            "within_rounding": len(within), "mismatch": sum(f["status"] == "mismatch" for f in compared),
            "not_compared": len(figures) - len(compared),
            "largest_within_rounding_difference": max((f["difference"] for f in within), default=None)}


def _g(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _processes_line(record: dict) -> str:
    processes = [p for p in record.get("processes") or [] if isinstance(p, dict)]
    codes = ", ".join(str(p.get("returncode")) for p in processes)
    return (f"published cleanup: all task processes exited: {record.get('all_task_processes_exited')}; "
            f"{len(record.get('processes') or [])} processes (return codes {codes or 'none'})")


def cleanup_line(cleanup: dict) -> str | None:
    record = cleanup.get("summary") or cleanup.get("cleanup_json")
    if isinstance(record, dict) and "processes" in record:
        line = _processes_line(record)
    elif cleanup.get("per_arm"):
        line = "published cleanup: " + "; ".join(f"{a}: {json.dumps(c, sort_keys=True)}"
                                                 for a, c in cleanup["per_arm"].items())
    else:
        return None
    if "consistent" in cleanup:
        line += "; cleanup.json " + ("equals" if cleanup["consistent"] else "DIFFERS FROM") + " summary.json's cleanup"
    return line + "."


_MARKS = {"exact": "EXACT ", "within_rounding": "WITHIN", "mismatch": "DIFF  ", "not_compared": "N/A   "}


def _status(f: dict) -> str:
    """A figure's label; records written before labels existed carry only `matches`."""
    return f.get("status") or ("exact" if f.get("matches") else "mismatch")


def _where(f: dict) -> str:
    return f"{f['arm']} pass {f['pass']}" if f["pass"] is not None else f"{f['arm'] or '-'} all"


def _extra(f: dict, status: str) -> str:
    if status == "within_rounding":
        return f"  |diff| {f['difference']:.1e} <= {f['half_unit']:.1e}"
    if status == "not_compared":
        return f"  ({f.get('note', 'not compared')})"
    return ""


def _figure_line(f: dict) -> str:
    status = _status(f)
    rule = f" ({f['rule']})" if f.get("rule") else ""
    return (f"{_MARKS[status]} {_where(f):<26} {f['figure']:<27} published {_g(f['published'])}  ours {_g(f['ours'])}"
            f"{rule}{_extra(f, status)}")


def _summary_line(report: dict) -> str:
    counts = report.get("figure_counts") or figure_counts([dict(f, status=_status(f)) for f in report["figures"]])
    within = [f"{f['arm']} pass {f['pass']} {f['figure']}" if f["pass"] is not None else f"{f['arm']} {f['figure']}"
              for f in report["figures"] if f.get("status") == "within_rounding"]
    summary = (f"{counts['exact'] + counts['within_rounding']} of {counts['compared']} published figures reproduce: "
               f"{counts['exact']} exact, {counts['within_rounding']} within rounding")
    if within:
        summary += f" ({', '.join(within)}; largest difference {counts['largest_within_rounding_difference']:.1e})"
    summary += f", {counts['mismatch']} mismatch."
    if counts.get("not_compared"):
        summary += f" {counts['not_compared']} not compared."
    return summary


def figure_lines(report: dict) -> list[str]:
    return [*(_figure_line(f) for f in report["figures"]), _summary_line(report)]

"""`import-evidence --format system1-omni`: the native project's published evidence as a run.

Their format (see ../shared/facts/upstream.md): `<arm>-measured-<pass>.jsonl`, one object
per request `{id, latency_s, probability_yes, probability_delta, predicted, raw, checks,
client_start_monotonic_ns, client_end_monotonic_ns}`; `summary.json` with, per arm,
`passes` (`mean_ms, p50_ms, p95_ms, requests`), `aggregate_mean_ms`, `readiness`,
`cleanup`; `manifest.json` listing files with sha256.

The import first verifies every sha256 of their manifest (and refuses unlisted files),
then writes our layout: rows.jsonl (phase measured; latency from their client
nanoseconds), responses/<arm>.jsonl (their `raw` as canonical JSON, whose sha256 is the
row's body_sha256), a recipe.yaml describing what was imported, summary.json from
`results.summarize`, state.json with status "imported", and import.json: every published
figure next to ours and, for P95, which rank rule reproduces it. Imported runs are never
signed: we did not measure them.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from ..errors import EvidenceError, InputMismatch
from ..evidence import RunDir, read_json, write_json_atomic
from ..recipe import parse_recipe
from ..results import latency_stats, mean, summarize
from ..row_table import read_table
from ..rows import Row, RowWriter

__all__ = ["IMPORT_FORMAT_VERSION", "verify_source_manifest", "read_system1", "import_system1",
           "format_import_report"]

IMPORT_FORMAT_VERSION = 1
_FILE_RE = re.compile(r"^(?P<arm>[A-Za-z0-9][A-Za-z0-9_.-]*)-measured-(?P<pass>[0-9]+)\.jsonl$")
_FIELDS = {"id", "latency_s", "probability_yes", "probability_delta", "predicted", "raw", "checks",
           "client_start_monotonic_ns", "client_end_monotonic_ns"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify_source_manifest(src: Path) -> dict[str, str]:
    """Every file their manifest.json lists has that sha256, and every file is listed."""
    manifest = read_json(src / "manifest.json")
    entries = manifest.get("files", manifest) if isinstance(manifest, dict) else manifest
    if isinstance(entries, dict):
        listed = {str(k): str(v) for k, v in entries.items()}
    else:
        listed = {str(e.get("path") or e.get("name")): str(e.get("sha256")) for e in entries}
    problems = []
    for name, want in sorted(listed.items()):
        path = src / name
        if ".." in Path(name).parts or Path(name).is_absolute():
            problems.append(f"{name}: path leaves the directory")
        elif not path.is_file():
            problems.append(f"{name}: listed but absent")
        elif _sha256(path) != want:
            problems.append(f"{name}: sha256 {_sha256(path)[:12]}… differs from the manifest's {want[:12]}…")
    unlisted = sorted(p.relative_to(src).as_posix() for p in src.rglob("*")
                      if p.is_file() and p.name != "manifest.json" and p.relative_to(src).as_posix() not in listed)
    problems += [f"{name}: present but not in manifest.json" for name in unlisted]
    if problems:
        raise InputMismatch(f"{src} does not match its manifest.json: " + "; ".join(problems)
                            + ". Nothing was imported; fetch the evidence again.")
    return listed


def _row(obj: dict, arm: str, workload: str, pass_index: int, seq: int, where: str) -> tuple[Row, str]:
    missing = _FIELDS - set(obj)
    if missing:
        raise EvidenceError(f"{where}: lacks {', '.join(sorted(missing))}; not system1-omni evidence.")
    body = json.dumps(obj["raw"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    checks = obj["checks"] or {}
    failed = sorted(k for k, v in checks.items() if v is False and k != "correct")
    predicted = obj["predicted"]
    label = None
    if isinstance(checks.get("correct"), bool) and predicted in ("yes", "no"):
        # Their rows carry correctness, not the label: the label is what makes `correct` true.
        label = predicted if checks["correct"] else {"yes": "no", "no": "yes"}[predicted]
    usage = (obj["raw"] or {}).get("usage") or {}
    row = Row(id=str(obj["id"]), backend=arm, workload=workload, phase="measured", pass_index=pass_index, seq=seq,
              start_ns=int(obj["client_start_monotonic_ns"]), end_ns=int(obj["client_end_monotonic_ns"]),
              status=None, body_sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(),
              probability=obj["probability_yes"], decision=predicted, label=label,
              input_tokens=usage.get("input_tokens"), error=f"checks failed: {', '.join(failed)}" if failed else None)
    return row, body


def read_system1(src: Path, workload: str) -> tuple[list[Row], list[dict], list[str]]:
    """Rows, response entries and notes of every `<arm>-measured-<pass>.jsonl`, in file order."""
    rows, bodies, notes = [], [], []
    files = [(m, p) for p in src.iterdir() if (m := _FILE_RE.match(p.name))]
    if not files:
        raise EvidenceError(f"{src} holds no <arm>-measured-<pass>.jsonl files.")
    ids_by_arm: dict[str, list[str]] = {}
    for match, path in sorted(files, key=lambda mp: (mp[0]["arm"], int(mp[0]["pass"]))):
        arm, index = match["arm"].lower(), int(match["pass"])
        ids = []
        for seq, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvidenceError(f"{path}:{seq + 1}: not JSON ({exc}).") from exc
            row, body = _row(obj, arm, workload, index, seq, f"{path}:{seq + 1}")
            if abs(obj["latency_s"] * 1e9 - row.latency_ns) > 1e6:
                notes.append(f"{path.name}:{seq + 1}: latency_s {obj['latency_s']} differs from the client ns by over 1 ms")
            rows.append(row)
            ids.append(row.id)
            bodies.append({"backend": arm, "workload": workload, "phase": "measured", "pass_index": index,
                           "seq": seq, "id": row.id, "body": body})
        _check_ids(path.name, ids, ids_by_arm.setdefault(arm, ids))
    return rows, bodies, notes


def _check_ids(name: str, ids: list[str], reference: list[str]) -> None:
    seen: set[str] = set()
    dupes = sorted({i for i in ids if i in seen or seen.add(i)})  # one pass, a set: no quadratic count()
    if dupes:
        raise EvidenceError(f"{name}: duplicate case ids {', '.join(dupes[:5])}; a pass holds each case once.")
    missing, extra = sorted(set(reference) - set(ids)), sorted(set(ids) - set(reference))
    if missing or extra:
        raise EvidenceError(f"{name}: case ids differ from the arm's first pass "
                            f"(missing {', '.join(missing[:5]) or 'none'}; extra {', '.join(extra[:5]) or 'none'}).")


def _recipe(src: Path, rows: list[Row], workload: str, listed: dict[str, str]) -> dict:
    arms = sorted({r.backend for r in rows})
    passes = max(r.pass_index for r in rows)
    first = next(n for n in sorted(listed) if _FILE_RE.match(n))
    study_id = re.sub(r"[^a-z0-9_.-]+", "-", f"imported-{src.resolve().name}".lower())
    return {
        "format_version": 1,
        "study": {"id": study_id, "date": date.today().isoformat(),
                  "purpose": f"Per-request evidence imported from {src.resolve()} (system1-omni format); not measured here.",
                  "source": str(src.resolve())},
        "inputs": {"root": str(src.resolve()),
                   "files": [{"path": n, "sha256": s, "role": "imported-evidence"} for n, s in sorted(listed.items())]},
        "workloads": [{"name": workload, "requests": first, "feasibility_passes": 0, "measured_passes": passes}],
        "backends": [{"name": a, "command": ["imported"], "description": "imported arm"} for a in arms],
        "protocol": {"feasibility_passes": 0, "measured_passes": passes},
        "notes": ["Imported evidence: rows come from the source's client nanoseconds; bodies are their `raw`"
                  " as canonical JSON, not the original bytes; labels are inferred from checks.correct."],
    }


def _decimals(value: float) -> int:
    text = repr(float(value))
    return min(len(text.split(".")[1]) if "." in text and "e" not in text else 9, 9)


def _matches(ours: float | None, published: Any) -> bool:
    if ours is None or not isinstance(published, (int, float)):
        return False
    return abs(ours - published) <= 0.5 * 10 ** -_decimals(published) + 1e-9


def _figure(arm: str, pass_index: int | None, name: str, published: Any, stats: dict) -> dict:
    if name == "p95_ms":
        jev, near = stats["p95_jevbench_ms"], stats["p95_nearest_rank_ms"]
        rules = [rule for rule, value in (("jevbench", jev), ("nearest_rank", near)) if _matches(value, published)]
        return {"arm": arm, "pass": pass_index, "figure": name, "published": published,
                "ours": {"jevbench": jev, "nearest_rank": near}, "matches": bool(rules),
                "rule": " and ".join(rules) if rules else None}
    key = {"mean_ms": "mean_ms", "p50_ms": "p50_ms", "aggregate_mean_ms": "mean_ms", "requests": "n"}[name]
    return {"arm": arm, "pass": pass_index, "figure": name, "published": published, "ours": stats[key],
            "matches": _matches(stats[key], published), "rule": None}


def _published_figures(summary: dict, rows: list[Row]) -> list[dict]:
    arms = summary.get("arms", summary)
    figures = []
    for arm_name, entry in sorted(arms.items()):
        arm = arm_name.lower()
        arm_rows = [r for r in rows if r.backend == arm]
        if not arm_rows:
            figures.append({"arm": arm, "pass": None, "figure": "rows", "published": "present", "ours": None,
                            "matches": False, "rule": None})
            continue
        for p in entry.get("passes", []):
            index = int(p.get("pass", 0))
            stats = latency_stats([r.latency_ms for r in arm_rows if r.pass_index == index])
            for name in ("mean_ms", "p50_ms", "p95_ms", "requests"):
                if name in p:
                    figures.append(_figure(arm, index, name, p[name], stats))
        if "aggregate_mean_ms" in entry:
            figures.append(_figure(arm, None, "aggregate_mean_ms", entry["aggregate_mean_ms"],
                                   {"mean_ms": mean([r.latency_ms for r in arm_rows])}))
    return figures


def import_system1(src: Path, out: Path, *, workload: str = "mixed") -> dict:
    src, out = Path(src), Path(out)
    if out.exists():
        raise EvidenceError(f"{out} already exists; imports go into a new directory.")
    listed = verify_source_manifest(src)
    their_summary = read_json(src / "summary.json")
    rows, bodies, notes = read_system1(src, workload)
    recipe = _recipe(src, rows, workload, listed)
    parsed = parse_recipe(yaml.safe_dump(recipe, sort_keys=False), "imported recipe")
    out.mkdir(parents=True)
    (out / "responses").mkdir()
    run = RunDir(out)
    run.write_state({"status": "importing", "attempted": ["import"], "finished": [], "error": None})
    run.file("recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    with RowWriter(run.rows_path) as writer:
        for row in rows:
            writer.write(row)
    for arm in sorted({b["backend"] for b in bodies}):
        with open(run.responses_path(arm), "w", encoding="utf-8") as fh:
            for entry in (b for b in bodies if b["backend"] == arm):
                fh.write(json.dumps(entry, sort_keys=True) + "\n")
    write_json_atomic(run.file("summary.json"), summarize(read_table(run.rows_path), parsed))
    report = {
        "format_version": IMPORT_FORMAT_VERSION, "format": "system1-omni", "source": str(src.resolve()),
        "signed": False, "files_verified": len(listed), "source_manifest": listed,
        "figures": _published_figures(their_summary, rows),
        "readiness": {a: e.get("readiness") for a, e in their_summary.get("arms", their_summary).items()},
        "cleanup": {a: e.get("cleanup") for a, e in their_summary.get("arms", their_summary).items()},
        "notes": notes,
    }
    write_json_atomic(run.file("import.json"), report)
    run.update_state(status="imported", finished=["import"])
    return report


def format_import_report(report: dict) -> str:
    lines = [f"imported {report['files_verified']} files from {report['source']} (sha256 verified; UNSIGNED)"]
    for f in report["figures"]:
        where = f"{f['arm']} pass {f['pass']}" if f["pass"] is not None else f"{f['arm']} all"
        ours = f["ours"] if not isinstance(f["ours"], dict) else ", ".join(f"{k} {v}" for k, v in f["ours"].items())
        rule = f" ({f['rule']})" if f["rule"] else ""
        lines.append(f"{'MATCH' if f['matches'] else 'DIFF '}  {where:<14} {f['figure']:<18} published {f['published']}"
                     f"  ours {ours}{rule}")
    differ = sum(not f["matches"] for f in report["figures"])
    lines.append(f"{len(report['figures']) - differ} of {len(report['figures'])} published figures reproduce.")
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)

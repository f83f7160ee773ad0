"""`--format provenance-json`: a `provenance.json` listing files with sha256, and raw rows per mode.

The layout of system1-omni's jev_vl `evidence/review-<date>/`: `provenance.json` holds
`files: [{file, sha256, copied_verbatim}]` (no sizes), `hardware`, `measurement`, `limits`;
`raw-<mode>-c<concurrency>-p<pass>.jsonl` hold one object per request (`tag, pass, i, id,
group, t_start, status, client_s, cache, server_s, num_model_requests, usage, t_end`; passes
count from 0); `summary.json` holds per mode (`cache_<mode>`) `n, median_s, mean_s` over all
passes and per pass, `<a>_div_<b>_median` ratios and `parity` verdicts. Every listed file
that is present is checked against its sha256; a listed file that is absent is recorded as
such; a present file the list does not name (summary.json is one there) is imported but
recorded as "not listed, not verified".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...errors import EvidenceError, InputMismatch
from .layout import Layout, finish
from .manifest import file_state, read_finite_json
from .run import Origin
from .samples import MAX_INT, MAX_TOKENS, Sample, bounded_number, check_id, check_int, check_seconds

__all__ = ["detect", "import_provenance", "read_listing"]

PROVENANCE_NAME, SUMMARY_NAME = "provenance.json", "summary.json"
_RAW = re.compile(r"^raw-(?P<mode>[a-z0-9][a-z0-9_]*)-c(?P<conc>[1-9][0-9]{0,3})-p(?P<pass>[0-9]{1,5})\.jsonl$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_ROW_BYTES = 1 << 20


def detect(src: Path) -> bool:
    src = Path(src)
    return (src / PROVENANCE_NAME).is_file() and any(_RAW.match(p.name) for p in src.iterdir())


def _listing_entry(item: Any) -> tuple[str, dict[str, Any]]:
    """One `files` entry, {file, sha256, ...}: a plain file name in this folder and 64 hex digits."""
    name = item.get("file") if isinstance(item, dict) else None
    digest = item.get("sha256") if isinstance(item, dict) else None
    if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", "..", PROVENANCE_NAME):
        raise InputMismatch(f"{PROVENANCE_NAME}: file entry {str(item)[:80]} does not name a file in this folder.")
    if not isinstance(digest, str) or not _HEX64.match(digest.lower()):
        raise InputMismatch(f"{PROVENANCE_NAME}: {name}: sha256 {str(digest)[:70]!r} is not 64 hex digits.")
    return name, {**item, "sha256": digest.lower()}


def read_listing(root: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """provenance.json and its `files` as {name: {sha256, ...}}."""
    data = read_finite_json(root / PROVENANCE_NAME, PROVENANCE_NAME)
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise InputMismatch(f"{PROVENANCE_NAME}: not an object with a files list.")
    entries: dict[str, dict[str, Any]] = {}
    for item in data["files"]:
        name, entry = _listing_entry(item)
        if name in entries:
            raise InputMismatch(f"{PROVENANCE_NAME}: {name} is listed twice.")
        entries[name] = entry
    if not entries:
        raise InputMismatch(f"{PROVENANCE_NAME}: lists no files.")
    return data, entries


def _check_states(root: Path, states: dict[str, str]) -> None:
    """InputMismatch naming every listed file that is present but wrong (absent is not wrong)."""
    problems = [f"{n}: {state}" for n, state in states.items() if state not in ("", "absent")]
    if problems:
        raise InputMismatch(f"{root} does not match its {PROVENANCE_NAME}: " + "; ".join(problems)
                            + ". Nothing was imported; fetch the evidence again.")


def _unlisted(root: Path, entries: dict[str, dict[str, Any]]) -> list[str]:
    """Regular files in the folder that the listing does not name (provenance.json itself aside)."""
    present = sorted(p.name for p in root.iterdir() if p.is_file() and not p.is_symlink())
    return [n for n in present if n not in entries and n != PROVENANCE_NAME]


def _verify(root: Path, entries: dict[str, dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    """(verified, absent, unlisted); InputMismatch naming every listed file whose sha256 differs."""
    states = {name: file_state(root / name, entry["sha256"], PROVENANCE_NAME) for name, entry in sorted(entries.items())}
    _check_states(root, states)
    verified = [n for n, state in states.items() if not state]
    absent = [n for n, state in states.items() if state == "absent"]
    return verified, absent, _unlisted(root, entries)


def _start_ns(start: Any, where: str) -> int | None:
    """Their t_start (epoch seconds) as whole nanoseconds; None when not published."""
    if start is None:
        return None
    if not bounded_number(start, 0, MAX_INT / 1e9):
        raise EvidenceError(f"{where}: t_start {str(start)[:40]} is not a finite clock reading in seconds.")
    return round(start * 1e9)


def _row(obj: Any, mode: str, their_pass: int, where: str) -> Sample:
    if not isinstance(obj, dict):
        raise EvidenceError(f"{where}: a row is {type(obj).__name__}, not a JSON object.")
    missing = [k for k in ("id", "client_s", "status") if k not in obj]
    if missing:
        raise EvidenceError(f"{where}: lacks {', '.join(missing)}; not a provenance-json raw row.")
    if obj.get("tag", mode) != mode or obj.get("pass", their_pass) != their_pass:
        raise EvidenceError(f"{where}: tag {str(obj.get('tag'))[:20]!r} / pass {str(obj.get('pass'))[:20]} "
                            f"differ from the file name's {mode!r} / {their_pass}.")
    check_int(obj["status"], where, "status", 999)
    usage = obj.get("usage")
    tokens = None
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        tokens = check_int(usage["prompt_tokens"], where, "usage.prompt_tokens", MAX_TOKENS)
    start_ns = _start_ns(obj.get("t_start"), where)
    return Sample(id=check_id(obj["id"], where), arm=mode, workload="replay", pass_index=their_pass + 1,
                  seconds=check_seconds(obj["client_s"], where, "client_s"), input_tokens=tokens,
                  start_ns=start_ns, body=obj)


def _read_rows(root: Path, names: list[str]) -> list[Sample]:
    samples: list[Sample] = []
    for name in names:
        match = _RAW.match(name)
        assert match is not None
        ids: set[str] = set()
        try:
            text = (root / name).read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise EvidenceError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
        for number, line in enumerate(text.splitlines(), start=1):
            where = f"{name}:{number}"
            if len(line) > MAX_ROW_BYTES:
                raise EvidenceError(f"{where}: a row over {MAX_ROW_BYTES} characters.")
            try:
                obj = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except (ValueError, RecursionError) as exc:
                raise EvidenceError(f"{where}: not JSON ({str(exc)[:80]}).") from None
            sample = _row(obj, match["mode"], int(match["pass"]), where)
            if sample.id in ids:
                raise EvidenceError(f"{where}: duplicate case id {sample.id}; a pass holds each case once.")
            ids.add(sample.id)
            samples.append(sample)
        if not ids:
            raise EvidenceError(f"{name}: holds no rows.")
    return samples


def _mode_descriptions(data: dict[str, Any], summary: dict[str, Any], modes: set[str]) -> dict[str, str]:
    """Each mode as the published study names it: its summary.json entry and provenance.json's `measurement.modes`."""
    measurement = data.get("measurement")
    how = measurement.get("modes") if isinstance(measurement, dict) else None
    how_text = f"; their modes: {how.strip()[:300]}" if isinstance(how, str) and how.strip() else ""
    return {m: f"mode {m} of the published study (summary.json {'cache_' + m if 'cache_' + m in summary else m}"
               f"{how_text})" for m in modes}


_RATIO_KEY = re.compile(r"^(?P<a>[a-z0-9][a-z0-9_]*?)_div_(?P<b>[a-z0-9][a-z0-9_]*?)_median$")


def _reference_first(summary: dict[str, Any], modes: set[str]) -> list[str]:
    """[a, b] when summary.json publishes `<a>_div_<b>_median` (a over b: a is the reference); [] otherwise."""
    for key in sorted(summary):
        match = _RATIO_KEY.match(key)
        if match and {match["a"], match["b"]} == modes:
            return [match["a"], match["b"]]
    return []


def _refuse(names: list[str], problem: str) -> None:
    """InputMismatch naming the raw files among `names` (unlisted or missing ones) and their problem."""
    raw = sorted(n for n in names if _RAW.match(n))
    if raw:
        raise InputMismatch(f"{', '.join(raw[:3])}: {problem}. Nothing was imported.")


def _imported_files(root: Path, verified: list[str], absent: list[str], unlisted: list[str]) -> list[str]:
    """The raw files to import: every raw file the listing names, each present and verified. A raw file it
    does not name never becomes an arm or a pass, and one it names that is absent is never dropped from the
    count: either is refused. summary.json may be unlisted (the published layout does not list it)."""
    _refuse(unlisted, f"present but not listed in {PROVENANCE_NAME}; only the rows it lists are the published evidence")
    _refuse(absent, f"listed in {PROVENANCE_NAME} but missing; the published figures count its rows. Fetch the "
            "evidence again")
    raw = sorted(n for n in verified if _RAW.match(n))
    if not raw:
        raise InputMismatch(f"{root}: no raw-<mode>-c<n>-p<pass>.jsonl is present.")
    if SUMMARY_NAME not in verified + unlisted:
        raise InputMismatch(f"{SUMMARY_NAME}: not present; the published figures come from it.")
    return raw


def _provenance(imported: list[str], unlisted: list[str]) -> str:
    """"verified", or which imported files the listing does not name."""
    unverified = sorted(set(imported) & set(unlisted))
    if not unverified:
        return "verified"
    return f"partly verified: {', '.join(unverified)} not listed in {PROVENANCE_NAME}"


def _summary(root: Path) -> dict[str, Any]:
    summary = read_finite_json(root / SUMMARY_NAME, SUMMARY_NAME)
    if not isinstance(summary, dict):
        raise EvidenceError(f"{SUMMARY_NAME}: not a JSON object.")
    return summary


_NOTE = ("Imported evidence (provenance-json): latencies are their client_s; passes count from 0 in their files and "
         "from 1 here; rows carry no probabilities.")


def import_provenance(src: Path, out: Path, *, workload: str = "mixed", subdir: str | None = None,
                      origin: Origin | None = None) -> dict:
    """Verify `src` against its provenance.json and convert its raw rows into the new run `out`."""
    root = Path(src).resolve()
    if not detect(root):
        raise InputMismatch(f"{src}: no {PROVENANCE_NAME} with raw-<mode>-c<n>-p<pass>.jsonl; "
                            "not the provenance-json layout.")
    data, entries = read_listing(root)
    verified, absent, unlisted = _verify(root, entries)
    raw = _imported_files(root, verified, absent, unlisted)
    summary = _summary(root)
    samples = _read_rows(root, raw)
    modes = {s.arm for s in samples}
    layout = Layout(fmt="provenance-json", root=root, samples=samples, summary=summary,
                    arm_descriptions=_mode_descriptions(data, summary, modes),
                    arm_order=_reference_first(summary, modes),
                    files=[PROVENANCE_NAME, *sorted(set(raw) | {SUMMARY_NAME})],
                    provenance=_provenance([*raw, SUMMARY_NAME], unlisted),
                    digests_file=PROVENANCE_NAME, verified=verified, source_digests=entries,
                    documents=[data, summary], meta={k: v for k, v in data.items() if k != "files"},
                    absent=absent, notes=[f"{n}: present but not listed in {PROVENANCE_NAME}: imported, not verified"
                                          for n in unlisted],
                    note=_NOTE)
    return finish(layout, out, origin)

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
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from ...errors import EvidenceError, InputMismatch
from ...evidence.decoding import UNSET, Quoted, UnsetType, decode
from .layout import Layout, finish
from .manifest import file_state, read_finite_json
from .published import NotAnObject
from .run import Origin
from .samples import MAX_INT, MAX_SECONDS, MAX_TOKENS, Sample, check_id

__all__ = ["Listing", "RawRow", "detect", "import_provenance"]

PROVENANCE_NAME, SUMMARY_NAME = "provenance.json", "summary.json"
_RAW = re.compile(r"^raw-(?P<mode>[a-z0-9][a-z0-9_]*)-c(?P<conc>[1-9][0-9]{0,3})-p(?P<pass>[0-9]{1,5})\.jsonl$")
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_RATIO_KEY = re.compile(r"^(?P<a>[a-z0-9][a-z0-9_]*?)_div_(?P<b>[a-z0-9][a-z0-9_]*?)_median$")
MAX_ROW_BYTES = 1 << 20


def detect(src: Path) -> bool:
    src = Path(src)
    return (src / PROVENANCE_NAME).is_file() and any(_RAW.match(p.name) for p in src.iterdir())


class ListedFile(msgspec.Struct, frozen=True, kw_only=True):
    """One `files` entry: a plain file name in this folder and its sha256 (their other keys left alone)."""

    file: str
    sha256: Annotated[str, Meta(pattern=_HEX64.pattern)]


class Measurement(msgspec.Struct, frozen=True, kw_only=True):
    modes: Quoted = None


class Listing(msgspec.Struct, frozen=True, kw_only=True):
    """provenance.json: the files it lists with their sha256, and how it says the modes were measured."""

    files: tuple[ListedFile, ...]
    measurement: Measurement | NotAnObject = None

    @classmethod
    def read(cls, root: Path) -> tuple[Listing, dict[str, Any], dict[str, dict[str, Any]]]:
        """(the listing, provenance.json as published, its `files` as {name: the entry as published with
        its sha256 in lower case}); InputMismatch naming the entry that is not a file of this folder."""
        data = read_finite_json(root / PROVENANCE_NAME, PROVENANCE_NAME)
        if not isinstance(data, dict):
            raise InputMismatch(f"{PROVENANCE_NAME}: not an object with a files list.")
        try:
            listing = msgspec.convert(data, cls, strict=True)
        except msgspec.ValidationError as exc:
            raise InputMismatch(f"{PROVENANCE_NAME}: {' '.join(str(exc).split())[:300]}.") from None
        entries: dict[str, dict[str, Any]] = {}
        for entry, published in zip(listing.files, data.get("files", ()), strict=True):
            name = entry.file
            if "/" in name or "\\" in name or name in ("", ".", "..", PROVENANCE_NAME):
                raise InputMismatch(f"{PROVENANCE_NAME}: file entry {str(published)[:80]} does not name a file in "
                                    "this folder.")
            if name in entries:
                raise InputMismatch(f"{PROVENANCE_NAME}: {name} is listed twice.")
            entries[name] = {**published, "sha256": entry.sha256.lower()}
        if not entries:
            raise InputMismatch(f"{PROVENANCE_NAME}: lists no files.")
        return listing, data, entries

    def mode_descriptions(self, summary: dict[str, Any], modes: set[str]) -> dict[str, str]:
        """Each mode as the published study names it: its summary.json entry and `measurement.modes`."""
        how = self.measurement.modes if isinstance(self.measurement, Measurement) else None
        how_text = f"; their modes: {how.strip()[:300]}" if isinstance(how, str) and how.strip() else ""
        return {m: f"mode {m} of the published study (summary.json {'cache_' + m if 'cache_' + m in summary else m}"
                   f"{how_text})" for m in modes}


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: Annotated[int, Meta(ge=0, le=MAX_TOKENS)] | UnsetType = UNSET


class RawRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of a raw-<mode>-c<n>-p<pass>.jsonl file: the keys the import reads (the row itself is kept
    whole, as their body)."""

    id: str
    client_s: Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
    status: Annotated[int, Meta(ge=0, le=999)]
    tag: str | UnsetType = UNSET
    pass_index: int | UnsetType = msgspec.field(default=UNSET, name="pass")
    usage: Usage | NotAnObject = None
    t_start: Annotated[float, Meta(ge=0, le=MAX_INT / 1e9)] | None = None  # their start clock, epoch seconds

    def sample(self, body: Any, mode: str, their_pass: int, where: str) -> Sample:
        if self.tag not in (UNSET, mode) or self.pass_index not in (UNSET, their_pass):
            raise EvidenceError(f"{where}: tag {str(self.tag)[:20]!r} / pass {str(self.pass_index)[:20]} "
                                f"differ from the file name's {mode!r} / {their_pass}.")
        tokens = self.usage.prompt_tokens if isinstance(self.usage, Usage) else UNSET
        return Sample(id=check_id(self.id, where), arm=mode, workload="replay", pass_index=their_pass + 1,
                      seconds=self.client_s, input_tokens=None if tokens is UNSET else tokens,
                      start_ns=None if self.t_start is None else round(self.t_start * 1e9), body=body)


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
            sample = decode(obj, RawRow, where).sample(obj, match["mode"], int(match["pass"]), where)
            if sample.id in ids:
                raise EvidenceError(f"{where}: duplicate case id {sample.id}; a pass holds each case once.")
            ids.add(sample.id)
            samples.append(sample)
        if not ids:
            raise EvidenceError(f"{name}: holds no rows.")
    return samples


def _reference_first(summary: dict[str, Any], modes: set[str]) -> list[str]:
    """[a, b] when summary.json publishes `<a>_div_<b>_median` (a over b: a is the reference); [] otherwise."""
    for key in sorted(summary):
        match = _RATIO_KEY.match(key)
        if match and {match["a"], match["b"]} == modes:
            return [match["a"], match["b"]]
    return []


def _listed_states(root: Path, digests: dict[str, str]) -> tuple[list[str], list[str]]:
    """(verified, absent) listed files; InputMismatch naming every one present with another sha256."""
    states = {name: file_state(root / name, digests[name], PROVENANCE_NAME) for name in sorted(digests)}
    problems = [f"{n}: {state}" for n, state in states.items() if state not in ("", "absent")]
    if problems:
        raise InputMismatch(f"{root} does not match its {PROVENANCE_NAME}: " + "; ".join(problems)
                            + ". Nothing was imported; fetch the evidence again.")
    return [n for n, state in states.items() if not state], [n for n, state in states.items() if state == "absent"]


def _check_files(root: Path, digests: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(verified, absent, unlisted) files of the folder. Every listed file that is present must match its
    sha256 (absent is recorded, not wrong). The raw files imported are exactly the ones the listing names,
    each present and verified: a raw file it does not name never becomes an arm or a pass, and one it names
    that is absent is never dropped from the count. summary.json may be unlisted (the published layout does
    not list it). InputMismatch naming what is not so."""
    verified, absent = _listed_states(root, digests)
    present = sorted(p.name for p in root.iterdir() if p.is_file() and not p.is_symlink())
    unlisted = [n for n in present if n not in digests and n != PROVENANCE_NAME]
    _refuse(unlisted, f"present but not listed in {PROVENANCE_NAME}; only the rows it lists are the published evidence")
    _refuse(absent, f"listed in {PROVENANCE_NAME} but missing; the published figures count its rows. Fetch the "
            "evidence again")
    if not any(_RAW.match(n) for n in verified):
        raise InputMismatch(f"{root}: no raw-<mode>-c<n>-p<pass>.jsonl is present.")
    if SUMMARY_NAME not in verified + unlisted:
        raise InputMismatch(f"{SUMMARY_NAME}: not present; the published figures come from it.")
    return verified, absent, unlisted


def _refuse(names: list[str], problem: str) -> None:
    """InputMismatch naming the raw files among `names` (unlisted or missing ones) and their problem."""
    raw = sorted(n for n in names if _RAW.match(n))
    if raw:
        raise InputMismatch(f"{', '.join(raw[:3])}: {problem}. Nothing was imported.")


_NOTE = ("Imported evidence (provenance-json): latencies are their client_s; passes count from 0 in their files and "
         "from 1 here; rows carry no probabilities.")


def import_provenance(src: Path, out: Path, *, workload: str = "mixed", subdir: str | None = None,
                      origin: Origin | None = None) -> dict:
    """Verify `src` against its provenance.json and convert its raw rows into the new run `out`."""
    root = Path(src).resolve()
    if not detect(root):
        raise InputMismatch(f"{src}: no {PROVENANCE_NAME} with raw-<mode>-c<n>-p<pass>.jsonl; "
                            "not the provenance-json layout.")
    listing, data, entries = Listing.read(root)
    verified, absent, unlisted = _check_files(root, {e.file: e.sha256.lower() for e in listing.files})
    raw = sorted(n for n in verified if _RAW.match(n))
    summary = read_finite_json(root / SUMMARY_NAME, SUMMARY_NAME)
    if not isinstance(summary, dict):
        raise EvidenceError(f"{SUMMARY_NAME}: not a JSON object.")
    samples = _read_rows(root, raw)
    meta = dict(data)  # provenance.json as published, but for the files its listing holds
    del meta["files"]
    modes = {s.arm for s in samples}
    unverified = sorted({*raw, SUMMARY_NAME} & set(unlisted))
    layout = Layout(fmt="provenance-json", root=root, samples=samples, summary=summary,
                    arm_descriptions=listing.mode_descriptions(summary, modes),
                    arm_order=_reference_first(summary, modes),
                    files=[PROVENANCE_NAME, *sorted(set(raw) | {SUMMARY_NAME})],
                    provenance=(f"partly verified: {', '.join(unverified)} not listed in {PROVENANCE_NAME}"
                                if unverified else "verified"),
                    digests_file=PROVENANCE_NAME, verified=verified, source_digests=entries,
                    documents=[data, summary], meta=meta,
                    absent=absent, notes=[f"{n}: present but not listed in {PROVENANCE_NAME}: imported, not verified"
                                          for n in unlisted],
                    note=_NOTE)
    return finish(layout, out, origin)

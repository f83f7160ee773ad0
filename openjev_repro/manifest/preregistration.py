"""Pre-registration (issue 38): what a study fixes and signs before its first timed request.

`preregistration.dsse.json` is a DSSE envelope of an in-toto Statement v1 whose subject is the run's
recipe.yaml and whose predicate holds the recipe's protocol, gates and `reproduction:` margins, the inputs
lock (every declared input's path and sha256, as inputs.json checked them), the planned case order of
every workload and the time. The study writes it only when it signs (`--key`); being a file of the run,
the final manifest lists its digest. `verify` (audit/preregistration_check.py) fails a run whose signed
recipe's gates, protocol or margins, or whose plan's case order, differ from the pre-registered ones.

With `--tsa URL`, an RFC 3161 timestamp of the envelope's bytes is asked of that authority and kept beside
it as `preregistration.tsr` (manifest/timestamp.py); the study never needs one to run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from ..errors import EvidenceError, VerificationError
from ..evidence.files import write_bytes_atomic
from ..evidence.recipe import Recipe
from ..evidence.reproduction import Reproduction
from ..evidence.rundir import RunDir
from .dsse import envelope_bytes, make_envelope, parse_envelope, payload_of, verify_envelope
from .keys import load_private_key, load_public_key

__all__ = ["PREREGISTRATION_NAME", "PREREGISTRATION_TYPE", "TIMESTAMP_NAME", "Preregistered", "preregister",
           "preregistered_parts", "read_preregistration", "write_preregistration"]

PREREGISTRATION_NAME = "preregistration.dsse.json"
PREREGISTRATION_TYPE = "https://openjev-repro.dev/preregistration/v1"
TIMESTAMP_NAME = "preregistration.tsr"  # RFC 3161 TimeStampResp (DER) of preregistration.dsse.json's bytes
_Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
_Text = Annotated[str, msgspec.Meta(max_length=4096)]
JsonObject = dict[str, object]  # a recipe part as JSON; compared with the signed recipe's, never read by key


class InputDigest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    path: _Text
    sha256: _Sha256 | None


class Preregistered(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The predicate: what the study declared before measuring."""

    format_version: Literal[1] = 1
    study_id: _Text
    recipe_sha256: _Sha256
    protocol: JsonObject
    gates: list[JsonObject]
    reproduction: JsonObject | None
    inputs: list[InputDigest]
    case_order: dict[str, list[_Text]]
    registered_utc: _Text

    @property
    def margins(self) -> Reproduction | None:
        return None if self.reproduction is None else Reproduction.model_validate(self.reproduction)

    def recipe_differences(self, recipe: Recipe, recipe_bytes: bytes) -> list[str]:
        """What a run's signed recipe changed of what was pre-registered: its bytes, and apart from them its
        gates, protocol, margins and study id (the parts a reader needs named)."""
        protocol, gates, margins = preregistered_parts(recipe)
        found = [f"{name} differ from the pre-registered ones" for name, now, then in (
            ("gates", gates, self.gates), ("protocol settings", protocol, self.protocol),
            ("reproduction margins", margins, self.reproduction)) if now != then]
        digest = hashlib.sha256(recipe_bytes).hexdigest()
        if digest != self.recipe_sha256:
            found.append(f"recipe.yaml has sha256 {digest[:12]}, not the pre-registered {self.recipe_sha256[:12]}")
        if recipe.study.id != self.study_id:
            found.append(f"study id {recipe.study.id!r} is not the pre-registered {self.study_id!r}")
        return found

    def run_differences(self, inputs: list[tuple[str, str | None]], case_order: dict[str, list[str]] | None
                        ) -> list[str]:
        """What a run measured other than pre-registered: the inputs it checked, the case order it planned."""
        found = []
        if inputs != [(i.path, i.sha256) for i in self.inputs]:
            found.append("the inputs inputs.json checked are not the pre-registered inputs lock")
        if case_order is not None and case_order != self.case_order:
            found.append("the case order of plan.json differs from the pre-registered one")
        return found


class _Subject(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: _Text
    digest: dict[str, _Sha256]


class _Statement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    type_: Literal["https://in-toto.io/Statement/v1"] = msgspec.field(name="_type")
    subject: list[_Subject]
    predicate_type: Literal["https://openjev-repro.dev/preregistration/v1"] = msgspec.field(name="predicateType")
    predicate: Preregistered


def _canonical(value: object) -> object:
    """The JSON form a comparison uses (tuples as lists, dates as text)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def preregistered_parts(recipe: Recipe) -> tuple[dict, list[dict], dict | None]:
    """(protocol, gates, reproduction) of a recipe in the form a pre-registration records them: what the recipe
    wrote, without the defaults this version fills in (a later version's new default never reads as a change)."""
    protocol = _canonical(recipe.protocol.model_dump(mode="json", exclude_unset=True))
    gates = _canonical([g.model_dump(mode="json", exclude_unset=True) for g in recipe.gates])
    margins = None if recipe.reproduction is None else _canonical(
        recipe.reproduction.model_dump(mode="json", exclude_unset=True))
    return protocol, gates, margins  # type: ignore[return-value]


def preregister(run: RunDir, recipe: Recipe, key_path: Path, tsa: str | None, say: Callable[[str], None]) -> None:
    """The study's hook, after plan.json and before the first timed request: the signed pre-registration of
    what plan.json plans, then its timestamp when `tsa` names an authority (a failure there is said, and the
    study goes on: a timestamp is never needed to run)."""
    from ..evidence.records import plan_of

    plan = plan_of(run)
    planned = {k: list(v) for k, v in (plan.case_ids or {}).items()} if plan is not None else {}
    path = write_preregistration(run, recipe, planned, key_path)
    say(f"pre-registered: {path.name} (signed: gates, margins, inputs and case order, before any timed request)")
    if tsa:
        from .timestamp import request_timestamp

        try:
            write_bytes_atomic(run.file(TIMESTAMP_NAME), request_timestamp(path.read_bytes(), tsa))
            say(f"timestamped by {tsa}: {TIMESTAMP_NAME}")
        except EvidenceError as exc:
            say(f"no timestamp of the pre-registration: {exc} (the study goes on without one)")


def write_preregistration(run: RunDir, recipe: Recipe, case_order: dict[str, list[str]], key_path: Path) -> Path:
    """Sign and write the pre-registration; returns its path."""
    from ..evidence.records import inputs_of

    recipe_bytes = run.file("recipe.yaml").read_bytes()
    lock = inputs_of(run)
    protocol, gates, margins = preregistered_parts(recipe)
    predicate = Preregistered(
        study_id=recipe.study.id, recipe_sha256=hashlib.sha256(recipe_bytes).hexdigest(), protocol=protocol,
        gates=gates, reproduction=margins,
        inputs=[InputDigest(path=f.path, sha256=f.actual) for f in (lock.files if lock else [])],
        case_order={k: list(v) for k, v in case_order.items()},
        registered_utc=datetime.now(UTC).isoformat(timespec="seconds"))
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": "recipe.yaml", "digest": {"sha256": predicate.recipe_sha256}}],
                 "predicateType": PREREGISTRATION_TYPE, "predicate": msgspec.to_builtins(predicate)}
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    data = envelope_bytes(make_envelope(payload, load_private_key(key_path)))
    out = run.file(PREREGISTRATION_NAME)
    if out.exists():
        raise EvidenceError(f"{out} already exists; a study is pre-registered once.")
    write_bytes_atomic(out, data)
    return out


def read_preregistration(run: RunDir, pubkey: Path | None) -> Preregistered:
    """The pre-registration of a run, its signature checked with `pubkey` (when given); VerificationError
    or EvidenceError (one line) when it is damaged or signed by another key."""
    path = run.file(PREREGISTRATION_NAME)
    envelope = parse_envelope(path.read_bytes(), str(path))
    if pubkey is not None:
        verify_envelope(envelope, load_public_key(pubkey))
    try:
        statement = msgspec.json.decode(payload_of(envelope), type=_Statement)
    except msgspec.ValidationError as exc:
        raise EvidenceError(f"{path}: not a pre-registration of this tool ({exc}).") from None
    except msgspec.DecodeError as exc:
        raise VerificationError(f"{path}: the payload is not JSON ({exc}).") from None
    return statement.predicate

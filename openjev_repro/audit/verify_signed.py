"""What a signed run (or a bundle of one) must show: the checks after the envelope has its shape.

In order: the signature; every subject digest; no file outside the subjects; the run is
complete; the copied run files equal the signed ones; case ids; the declared passes; response
bodies against row hashes; every statistic, gate and load-level figure recomputed from
rows.jsonl + recipe.yaml (`results.statistics.summarize`) equal to the signed values; and, in an
aggregate-only bundle, its files equal to the ones the run itself signed. `SignedRun` holds the
evidence and the signed statement; each check is one of its methods.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from ..errors import EvidenceError, ReproError, UnsupportedFormat
from ..evidence.records import plan_of
from ..evidence.rundir import ENVELOPE_NAME, RunDir
from ..evidence.statement import Statement
from ..hashing import hash_files
from ..manifest.dsse import Envelope, verify_envelope
from ..manifest.keys import keyid, load_public_key
from ..manifest.run_manifest import OPTIONAL_FILES, read_statement_record, recipe_json
from ..results.energy import GPU_FILE, read_gpu_events
from ..results.trace_gates import trace_inputs
from .attestation_check import gate_attestation_verdicts
from .identity_check import runtime_identity_verdict
from .preregistration_check import preregistration_verdicts
from .run_checks import (
    BAD_EVIDENCE,
    DAMAGE,
    Check,
    Evidence,
    case_ids_check,
    first_difference,
    responses_check,
    safe_name,
)
from .trace_audit import kernel_families_recomputed

__all__ = ["SignedRun"]


class SignedRun:
    """A run whose envelope and statement have the shape this tool writes, and what it was given to check."""

    def __init__(self, ev: Evidence, files: list[Path], envelope: Envelope, statement: Statement,
                 pubkey: Path | None, allow_unsigned: bool) -> None:
        self.ev, self.run = ev, ev.run
        self.envelope, self.statement = envelope, statement
        self.predicate: Mapping[str, Any] = statement.predicate
        self.aggregate_only = statement.aggregate_only
        self.pubkey, self.allow_unsigned = pubkey, allow_unsigned
        self.subjects: dict[str, str] = {}  # name -> signed sha256, once the subjects are checked
        self.present = {p.relative_to(self.run.path).as_posix() for p in files if p != self.run.path / ENVELOPE_NAME}

    def checks(self) -> list[Check]:
        checks = [Check("envelope", True, "canonical DSSE envelope with an in-toto Statement v1"), self.signature()]
        # Hash every subject in a background thread (hashlib releases the GIL) while the rows are parsed.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-hash") as pool:
            hashing = pool.submit(self._hash_subjects)
            self.ev.preload()
            checks += self.subject_checks(hashing.result)
        steps: list[tuple[str, Callable[[], list[Check]]]] = [
            ("complete", self.complete), ("copied files", self.copied_files),
            ("case ids", lambda: case_ids_check(self.ev)), ("protocol passes", self.protocol_passes),
            ("responses", lambda: responses_check(self.ev, self.aggregate_only)),
            ("recomputed", lambda: self.recomputed() + self.load_levels()),
            ("kernel families", self.kernel_families), ("runtime identity", self.runtime_identity)]
        for name, step in steps:
            checks += self._step(name, step, tampered=any(c.passed is False for c in checks))
        run, pubkey = self.ev.run, self.pubkey  # issue 38: what was fixed before the first pass, and each gate
        checks += [Check(*verdict) for verdict in preregistration_verdicts(run, pubkey)]
        checks += [Check(*verdict) for verdict in gate_attestation_verdicts(run, pubkey)]
        if self.aggregate_only:
            checks += self.source_manifest()
        return checks

    @staticmethod
    def _step(name: str, step: Callable[[], list[Check]], tampered: bool) -> list[Check]:
        """One content check; damaged evidence (never a bug of this tool) is its failed check."""
        try:
            return step()
        except UnsupportedFormat as exc:
            # A file as signed in a newer format: this tool cannot judge the run at all. A file
            # changed after signing (a failed check above) is tampering, reported as such.
            if not tampered:
                raise
            return [Check(name, False, str(exc))]
        except DAMAGE as exc:
            return [Check(name, False, f"{type(exc).__name__}: {exc}")]

    # --- signature and digests ---------------------------------------------------------

    def signature(self) -> Check:
        signatures = self.envelope.signatures
        if bool(signatures) != self.statement.signed:
            return Check("signature", False, f"the predicate says signed={self.predicate.get('signed')!r} "
                                             f"but the envelope has {len(signatures)} signatures")
        if not signatures:
            if self.allow_unsigned:
                return Check("signature", True, "UNSIGNED manifest, accepted because --allow-unsigned was given; "
                             "the checks below are against what it records", unsigned=True)
            return Check("signature", False, "the run is UNSIGNED; pass --allow-unsigned to check the rest anyway")
        if self.pubkey is None:
            return Check("signature", False, "the run is signed; pass --pubkey FILE to check the signature")
        if len(signatures) != 1:
            return Check("signature", False, f"the envelope holds {len(signatures)} signatures; "
                                             "openjev-repro signs with exactly one, so the others are not ours")
        try:
            keyid = verify_envelope(self.envelope, load_public_key(self.pubkey))
        except ReproError as exc:
            return Check("signature", False, str(exc))
        return Check("signature", True, f"Ed25519 signature by key {keyid[:16]}… over the DSSE PAE")

    def _hash_subjects(self) -> dict[str, str]:
        """sha256 of every listed subject the walk found as a regular file, hashed in parallel."""
        paths = {s.name: self.run.path / s.name for s in self.statement.subjects
                 if safe_name(s.name) and s.name in self.present}
        digests = hash_files(paths.values())
        return {name: digests[path] for name, path in paths.items()}

    def subject_checks(self, hashed: Callable[[], dict[str, str]]) -> list[Check]:
        """Every subject present with its signed sha256, listed once; no file that is not a subject."""
        bad: list[str] = []
        try:
            digests = hashed()
        except ReproError as exc:  # a file vanished or cannot be read while hashing
            digests = {}
            bad.append(str(exc))
        listed: dict[str, str] = {}
        for s in self.statement.subjects:
            if not safe_name(s.name):
                bad.append(f"malformed subject {s.name[:80]!r}")
                continue
            if s.name not in digests:  # only files the walk found: never through a link
                bad.append(f"{s.name} is listed but absent")
            elif digests[s.name] != s.sha256:
                bad.append(f"{s.name} has a different sha256 than signed")
            listed[s.name] = s.sha256
        names = [s.name for s in self.statement.subjects]
        if len(set(names)) != len(names):
            bad.append("a subject is listed twice")
        self.subjects = listed
        return [Check("subject digests", not bad and bool(listed),
                      "; ".join(bad) if bad else f"{len(listed)} files match their signed sha256"),
                self.unlisted_check()]

    def unlisted_check(self) -> Check:
        unlisted = sorted(self.present - set(self.subjects))
        return Check("no unlisted files", not unlisted, f"not in the manifest: {', '.join(unlisted[:10])}" if unlisted
                     else "every file is a subject (hidden names included; only regular files)")

    # --- run content ---------------------------------------------------------------------

    def complete(self) -> list[Check]:
        state = self.run.state_record()
        same = state.to_json() == self.predicate.get("state")
        return [Check("run complete", state.status == "complete" and same, f"state.json status {state.status!r}"
                      + ("" if same else "; differs from the signed state"))]

    def copied_files(self) -> list[Check]:
        """Files whose content the predicate carries must equal it."""
        run, predicate = self.run, self.predicate
        problems = []
        recipe_bytes = run.file("recipe.yaml").read_bytes()
        if hashlib.sha256(recipe_bytes).hexdigest() != predicate.get("recipe_sha256"):
            problems.append("recipe.yaml sha256")
        if _recorded_recipe(recipe_bytes) != predicate.get("recipe"):
            problems.append("recipe.yaml content")
        if run.as_written("summary.json") != predicate.get("summary"):
            problems.append("summary.json")
        problems += [name for key, name in OPTIONAL_FILES.items() if not _copy_matches(run, name, predicate.get(key))]
        return [Check("signed copies", not problems, "differ from the signed predicate: " + ", ".join(problems)
                      if problems else "recipe, summary and run files equal the signed predicate")]

    def protocol_passes(self) -> list[Check]:
        """Every (workload, backend) ran exactly the passes its plan schedules (plan.json's, as the runner ran
        them; the recipe's counts for a run without one), numbered 1..N, and nothing else: a key holder who
        drops or adds a measured pass and re-signs is caught here."""
        recipe, rows, plan = self.ev.recipe, self.ev.table, plan_of(self.ev.run)
        source = "the recipe" if plan is None else "the plan"
        problems = []
        phases: tuple[tuple[Literal["feasibility", "measured"], int], ...] = (("feasibility", 0), ("measured", 1))
        for phase, index in phases:
            declared = {(b.name, w.name): recipe.passes_for(w)[index] for w in recipe.workloads
                        for b in recipe.backends} if plan is None else plan.pass_budget(phase)
            found = {key: sorted(passes) for key, passes in rows.by_pass(phase).items()}
            for workload in recipe.workloads:
                for backend in recipe.backends:
                    want = list(range(1, declared.get((backend.name, workload.name), 0) + 1))
                    have = found.pop((workload.name, backend.name), [])
                    if have != want:
                        problems.append(f"{workload.name}/{backend.name}: {phase} passes {have or 'none'}, "
                                        f"{source} declares {len(want)}")
            problems += [f"{w}/{b}: {phase} passes {p} of a workload or backend the recipe does not declare"
                         for (w, b), p in found.items()]
        return [Check("protocol passes", not problems, "; ".join(problems[:6]) if problems
                      else f"every workload and backend ran the passes {source} declares")]

    def recomputed(self) -> list[Check]:
        """Every statistic and gate recomputed from the rows (and gpu.jsonl, where the run has it) equals the
        signed value exactly (both round-tripped through JSON, so they are compared as written)."""
        from ..results.statistics import summarize

        ev = self.ev
        gpu_path = ev.run.file(GPU_FILE)
        gpu = read_gpu_events(gpu_path) if gpu_path.is_file() else None
        # kernel-families.json, recomputed from traces/ by `kernel_families`
        ours = json.loads(json.dumps(summarize(ev.table, ev.recipe, gpu=gpu, **trace_inputs(ev.run.path)).to_json(),
                                     allow_nan=False))
        signed_summary = self.predicate.get("summary") or {}
        diff = first_difference({k: v for k, v in ours.items() if k != "gates"},
                                {k: v for k, v in signed_summary.items() if k != "gates"})
        gates_diff = first_difference(ours.get("gates"), self.predicate.get("gates"))
        return [Check("statistics recomputed", diff is None,
                      f"recomputed from rows differs from the signed summary at {diff}" if diff
                      else "every statistic recomputed from rows.jsonl equals the signed value exactly"),
                Check("gates recomputed", gates_diff is None,
                      f"recomputed gate outcomes differ at {gates_diff}" if gates_diff
                      else f"{len(ours.get('gates', []))} gate outcomes equal the signed ones")]

    def load_levels(self) -> list[Check]:
        """Load runs only (no check for a recipe without a load): the rows are the declared levels with their
        passes and schedules, and every per-level figure recomputed from them equals the signed `load` section."""
        from ..results.load import has_load, load_summary
        from ..results.load_protocol import level_problems

        ev = self.ev
        if not has_load(ev.recipe):
            return []
        problems = level_problems(ev.table, ev.recipe)
        load = load_summary(ev.table, ev.recipe)
        ours = json.loads(json.dumps(load.to_json() if load is not None else {}, allow_nan=False))
        signed = (self.predicate.get("summary") or {}).get("load")
        diff = first_difference(ours, signed, "load") if isinstance(signed, dict) else "load: absent from the signed summary"
        figures = sum(len(wl["levels"]) * len(wl["backends"]) for wl in ours["workloads"].values())
        return [Check("load levels", not problems, "; ".join(problems[:6]) if problems
                      else "every load workload ran its declared levels, each with its passes and schedule"),
                Check("load levels recomputed", diff is None,
                      f"recomputed from rows differs from the signed summary at {diff}" if diff
                      else f"{figures} (backend, level) figure sets recomputed from rows.jsonl equal the signed ones")]

    def kernel_families(self) -> list[Check]:
        """Runs with torch traces: kernel-families.json recomputed from traces/ (audit/trace_audit.py)."""
        return [Check(*outcome) for outcome in
                kernel_families_recomputed(self.run.path, self.ev.recipe, self.aggregate_only, first_difference)]

    def runtime_identity(self) -> list[Check]:
        """Issue 39: backends.json runtime_identity and kernel_caches.json well-formed (no check when absent)."""
        verdict = runtime_identity_verdict(self.run)
        return [] if verdict is None else [Check("runtime identity", *verdict)]

    # --- an aggregate-only bundle against the run's own manifest ---------------------------

    def source_manifest(self) -> list[Check]:
        """An aggregate-only bundle's files must be exactly the ones the run itself signed."""
        name = self.statement.source_envelope
        if not safe_name(name) or name not in self.subjects:
            return [Check("source manifest", False, f"source_envelope {str(name)[:80]!r} is not a signed file of "
                          "this bundle; it must be a relative name inside it, listed as a subject")]
        try:
            envelope, source = read_statement_record(self.run.path / str(name))
        except BAD_EVIDENCE as exc:
            return [Check("source manifest", False, str(exc))]
        checks = [self.source_subjects_check(source.digests)]
        if envelope.signatures and self.pubkey is not None:
            checks.append(_source_signature(envelope, self.pubkey))
        return [*checks, self.omitted_check()]

    def source_subjects_check(self, signed: dict[str, str]) -> Check:
        """Every bundled file and every omitted one has the digest the run's own statement signs."""
        name = self.statement.source_envelope
        wrong = [n for n, digest in self.subjects.items() if n != name and signed.get(n) != digest]
        wrong += [n for n, digest in self.statement.omitted if signed.get(n) != digest]
        if wrong:
            return Check("source manifest", False, f"differ from the run's own manifest: {', '.join(wrong)}")
        return Check("source manifest", True,
                     f"every file and omitted hash equals the run's signed subject ({len(signed)} subjects)")

    def omitted_check(self) -> Check:
        omitted = self.statement.omitted
        names = ", ".join(sorted({n.split("/", 1)[0] + "/" for n, _ in omitted})) or "nothing"
        return Check("omitted files", None, f"aggregate-only bundle omits {len(omitted)} files ({names}); "
                     "their hashes are listed but their content cannot be inspected")


def _source_signature(envelope: Envelope, pubkey: Path) -> Check:
    """The run's own signature: checked when it is by the given key (FAIL when it does not verify), N/A when
    the run was signed by another key, whose public half verify was not given."""
    key = load_public_key(pubkey)
    if keyid(key) not in envelope.keyids:
        return Check("source signature", None, "the run's own manifest is signed by another key than the given one; "
                     "verify the run with its own key to check it")
    try:
        verify_envelope(envelope, key)
    except ReproError as exc:
        return Check("source signature", False, f"the run's own manifest does not verify with the given key ({exc})")
    return Check("source signature", True, "the run's own manifest is signed by the same key")


def _recorded_recipe(recipe_bytes: bytes) -> Any:
    """recipe.yaml as a predicate records it; EvidenceError for YAML that JSON cannot hold (bytes, sets, date keys)."""
    try:
        return recipe_json(recipe_bytes)
    except TypeError as exc:  # raised by json.dumps on the file's values, never by this tool's own code
        raise EvidenceError(str(exc)) from None


def _copy_matches(run: RunDir, name: str, signed: Any) -> bool:
    """An optional run file equals its signed copy (or is absent, as the predicate records)."""
    on_disk = run.as_written(name)
    absent_signed = isinstance(signed, dict) and signed.get("available") is False and on_disk is None
    return absent_signed or on_disk == signed

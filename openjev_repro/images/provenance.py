"""The build-side records of an image (issue 39 item 5), written beside its build record in .cache/images/:

- `<name>.cdx.json`: a CycloneDX 1.6 SBOM of the image's Python environment (every pin of its
  hash-checked lock, with the sha256 the wheelhouse was checked against) and, for images on our Debian
  base, its Debian packages (the package lock the build checks the mirror against); the image itself
  (tag and digest) is the BOM's subject. Serial number and timestamp are derived from the content and
  the image's SOURCE_DATE_EPOCH, so one image's SBOM has one set of bytes.
- `<name>.provenance.json`: an SLSA provenance v1 predicate in an in-toto Statement v1 whose subject is
  the image digest: the builder (this package and its version), the base (digest), the locks (sha256),
  the upstream sources (commits), the build arguments, start and end. `invoke build --key KEY` signs it
  as a DSSE envelope, `<name>.provenance.dsse.json` (openjev_repro/cli/identity.py).

`python_sbom(spec)` is the Python part alone, from the lock, with no docker (`invoke sbom`).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from ..errors import VerificationError
from ..hashing import hash_file
from .debian import read_packages_lock
from .lockfile import read_lock
from .spec import CACHE_DIR, REPO_ROOT, ImageSpec

__all__ = ["BUILD_TYPE", "SLSA_PREDICATE", "BuildRecord", "image_sbom", "provenance_path", "provenance_statement",
           "python_sbom", "sbom_path", "statement_bytes", "validate_sbom"]

SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
BUILD_TYPE = "https://github.com/openjev-repro/openjev-repro/blob/main/docs/images.md#build-types-v1"
BUILDER_ID = "https://github.com/openjev-repro/openjev-repro/blob/main/openjev_repro/images/build.py"
_NAMESPACE = uuid.UUID("0b6d2f36-9e8e-4d52-9d0c-5f1a3c2e7b10")  # serial numbers: uuid5 of the BOM's content


class BuildRecord(msgspec.Struct, frozen=True):
    """What the provenance reads of a build record (.cache/images/<name>.json; other keys left alone)."""

    tag: str
    image_id: str
    built_at: str
    duration_s: float = 0.0
    diff_ids: tuple[str, ...] = ()
    labels: dict[str, str] = {}
    base_diff_id: str | None = None

    @property
    def digest(self) -> str:
        return self.image_id.removeprefix("sha256:")

    def label(self, name: str) -> str:
        return self.labels.get(f"org.opencontainers.image.{name}", "unknown")


def sbom_path(spec: ImageSpec) -> Path:
    return CACHE_DIR / f"{spec.name}.cdx.json"


def provenance_path(spec: ImageSpec, signed: bool) -> Path:
    return CACHE_DIR / f"{spec.name}.provenance{'.dsse' if signed else ''}.json"


def _relative(path: Path) -> str:
    return Path(path).resolve().relative_to(REPO_ROOT).as_posix()


def _python_components(spec: ImageSpec) -> list[Component]:
    lock = _relative(spec.lock_path)
    return [Component(name=pin.name, version=pin.version, type=ComponentType.LIBRARY,
                      purl=PackageURL("pypi", name=pin.name, version=pin.version), bom_ref=f"pypi:{pin.name}",
                      hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in pin.sha256],
                      properties=[Property(name="openjev-repro:lock", value=lock)])
            for pin in read_lock(spec.lock_path).pins]


def _debian_components(spec: ImageSpec) -> list[Component]:
    if spec.debian is None:
        return []
    lock = spec.directory / spec.debian.packages_lock
    return [Component(name=name, version=version, type=ComponentType.LIBRARY, bom_ref=f"deb:{name}",
                      purl=PackageURL("deb", namespace="debian", name=name, version=version,
                                      qualifiers={"distro": spec.debian.suite}),
                      properties=[Property(name="openjev-repro:lock", value=_relative(lock))])
            for name, version in sorted(read_packages_lock(lock).items())]


def _bom(spec: ImageSpec, components: list[Component], subject: Component) -> str:
    """The BOM's JSON: its serial number from its content, its time the image's SOURCE_DATE_EPOCH."""
    when = datetime.fromtimestamp(spec.source_date_epoch, tz=UTC)
    bom = Bom(components=components, metadata=BomMetaData(component=subject, timestamp=when))
    bom.register_dependency(subject, components)  # the image holds every component
    bom.serial_number = uuid.UUID(int=0)  # the draft's: its content alone names the document
    bom.serial_number = uuid.uuid5(_NAMESPACE, JsonV1Dot6(bom).output_as_string(indent=2))
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def python_sbom(spec: ImageSpec) -> str:
    """The Python environment the image's lock pins, as a CycloneDX 1.6 JSON document (no docker)."""
    subject = Component(name=spec.tag, type=ComponentType.CONTAINER, bom_ref=f"image:{spec.name}",
                        description=f"{spec.description} (Python environment from {_relative(spec.lock_path)})")
    return _bom(spec, _python_components(spec), subject)


def image_sbom(spec: ImageSpec, built: BuildRecord) -> str:
    """The built image's Python environment and Debian packages; the image (tag, digest) is the subject."""
    subject = Component(name=built.tag, type=ComponentType.CONTAINER, bom_ref=f"image:{spec.name}",
                        version=f"sha256:{built.digest}", description=spec.description,
                        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=built.digest)])
    return _bom(spec, _python_components(spec) + _debian_components(spec), subject)


def validate_sbom(text: str) -> None:
    """CycloneDX's own JSON schema validator (the library's `validation` extra); VerificationError if invalid."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise VerificationError(f"The SBOM is not valid CycloneDX 1.6: {error}")


def _dependencies(spec: ImageSpec, built: BuildRecord, revision: str) -> list[dict[str, Any]]:
    """What the build read: base, locks, this package's revision, upstream sources."""
    found: list[dict[str, Any]] = [{"name": "requirements.lock", "uri": f"file:{_relative(spec.lock_path)}",
                                    "digest": {"sha256": hash_file(spec.lock_path)}}]
    if spec.base:
        name, _, digest = spec.base.partition("@")
        found.append({"name": "base", "uri": f"docker-image://{name}", "digest": {"sha256": digest.removeprefix("sha256:")}})
    if built.base_diff_id:
        found.append({"name": "base", "uri": f"debootstrap:{spec.debian.suite if spec.debian else 'unknown'}",
                      "digest": {"sha256": built.base_diff_id.removeprefix("sha256:")}})
    if spec.debian is not None:
        lock = spec.directory / spec.debian.packages_lock
        found.append({"name": "debian-packages.lock", "uri": f"file:{_relative(lock)}", "digest": {"sha256": hash_file(lock)}})
    found.append({"name": "openjev-repro", "uri": "git+file:openjev-repro", "digest": {"gitCommit": revision}})
    return found + [{"name": s.name, "uri": f"git+{s.url}", "digest": {"gitCommit": s.commit}} for s in spec.sources]


def provenance_statement(spec: ImageSpec, built: BuildRecord, *, build_args: dict[str, str],
                         parameters: dict[str, Any], sbom_sha256: str) -> dict[str, Any]:
    """The SLSA provenance v1 statement of one built image (its subject: the image id's sha256)."""
    revision = built.label("revision")
    finished = datetime.strptime(built.built_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    started = datetime.fromtimestamp(finished.timestamp() - built.duration_s, tz=UTC)
    layers = [{"name": f"layer-{i}", "digest": {"sha256": d.removeprefix("sha256:")}} for i, d in enumerate(built.diff_ids)]
    sbom = {"name": "sbom", "uri": f"file:{sbom_path(spec).name}", "digest": {"sha256": sbom_sha256},
            "mediaType": "application/vnd.cyclonedx+json"}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": built.tag, "digest": {"sha256": built.digest}}],
        "predicateType": SLSA_PREDICATE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"backend": spec.backend, "image": spec.name, "tag": built.tag, **parameters},
                "internalParameters": {"kind": spec.kind, "python": spec.python, "platform": spec.platform,
                                       "source_date_epoch": spec.source_date_epoch, "build_args": build_args,
                                       "dirty_tree": revision.endswith("-dirty")},
                "resolvedDependencies": _dependencies(spec, built, revision.removesuffix("-dirty"))},
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"openjev-repro": built.label("version")}},
                "metadata": {"invocationId": f"{spec.name}@{finished.strftime('%Y%m%dT%H%M%SZ')}",
                             "startedOn": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
                             "finishedOn": finished.strftime("%Y-%m-%dT%H:%M:%SZ")},
                "byproducts": [sbom, *layers]}}}


def statement_bytes(statement: dict[str, Any]) -> bytes:
    return (json.dumps(statement, indent=2, sort_keys=True) + "\n").encode()

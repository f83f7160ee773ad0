"""Build images through the docker SDK and record what was built in .cache/images/<name>.json.

Two paths:
- Dockerfile images (hf, fast, native, reference): digest-pinned base, hash-locked requirements,
  sources at pinned commits. They need registry access and, to be useful, an NVIDIA host.
- The offline flavour (reference/offline): a debootstrap base imported into docker, packages
  installed from a hash-checked local wheelhouse in a container with no network, the result
  exported, made deterministic (rootfs.normalize_tar) and imported as a single layer.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from ..errors import DockerError, VerificationError
from ..evidence.files import read_versioned, write_json_atomic
from ..hashing import hash_file
from .daemon import connect
from .debian import make_base_tar, read_packages_lock
from .lockfile import STATUS_COMPLETE, fill_wheelhouse, read_lock, verify_wheelhouse
from .rootfs import diff_members, normalize_tar, read_members
from .spec import CACHE_DIR, PLACEHOLDER_DIGEST, REPO_ROOT, ImageSpec

__all__ = [
    "add_source_layer",
    "build",
    "build_dockerfile",
    "build_offline",
    "check_reproducible",
    "labels_for",
    "read_record",
    "record_path",
    "source_layer_dockerfile",
    "source_tag",
]

RECORD_FORMAT_VERSION = 1
Progress = Callable[[str], None]
# Set in every image that has upstream sources in its recipe: "none" in the environment layer,
# "<name>@<commit> ..." once the source layer is added.
UPSTREAM_ENV = "OPENJEV_REPRO_UPSTREAM_SOURCE"


def record_path(spec: ImageSpec) -> Path:
    return CACHE_DIR / f"{spec.name}.json"


def read_record(name: str) -> dict:
    path = CACHE_DIR / f"{name}.json"
    if not path.exists():
        raise DockerError(f"No build record at {path}; build the image with `invoke build`.")
    return read_versioned(path, (RECORD_FORMAT_VERSION,))


def _git_revision() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "openjev_repro", "images"], cwd=REPO_ROOT,
                           capture_output=True, text=True, check=False).stdout.strip()
    return (done.stdout.strip() or "unknown") + ("-dirty" if dirty else "")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openjev-repro")
    except PackageNotFoundError:
        return "unknown"


def labels_for(spec: ImageSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """OCI labels plus ours: every pin the image was built from."""
    created = datetime.fromtimestamp(spec.source_date_epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {
        "org.opencontainers.image.title": f"openjev-repro {spec.name}",
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.version": _version(),
        "org.opencontainers.image.revision": _git_revision(),
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "MIT",
        "io.openjev-repro.image": spec.name,
        "io.openjev-repro.backend": spec.backend,
        "io.openjev-repro.source-date-epoch": str(spec.source_date_epoch),
        "io.openjev-repro.lock.sha256": hash_file(spec.lock_path) if spec.lock_path.exists() else "none",
    }
    if spec.base:
        name, _, digest = spec.base.partition("@")
        labels["org.opencontainers.image.base.name"] = name
        labels["org.opencontainers.image.base.digest"] = digest
    if spec.cuda_arch:
        labels["io.openjev-repro.cuda-arch"] = f"sm_{spec.cuda_arch}"
    for src in spec.sources:
        labels[f"io.openjev-repro.source.{src.name}.url"] = src.url
        labels[f"io.openjev-repro.source.{src.name}.commit"] = src.commit
    for art in spec.artifacts:
        labels[f"io.openjev-repro.artifact.{art.name}.sha256"] = art.sha256
    return {**labels, **spec.labels, **(extra or {})}


def _write_record(spec: ImageSpec, image, started: float, extra: dict) -> dict:
    image.reload()
    record = {
        "format_version": RECORD_FORMAT_VERSION,
        "name": spec.name,
        "backend": spec.backend,
        "tag": spec.tag,
        "image_id": image.id,
        "repo_digests": image.attrs.get("RepoDigests", []),
        "diff_ids": image.attrs["RootFS"].get("Layers", []),
        "labels": image.attrs["Config"].get("Labels") or {},
        "built_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "duration_s": round(time.monotonic() - started, 1),
        **extra,
    }
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    write_json_atomic(record_path(spec), record)
    return record


def _check_pins(spec: ImageSpec) -> None:
    if spec.kind == "dockerfile" and spec.debian is None and not spec.base_resolved:
        raise VerificationError(
            f"images/{spec.backend}/image.yaml pins base {spec.base!r}, whose digest is an unresolved placeholder. "
            f"Resolve it with `invoke lock --backend {spec.backend}` on a host with registry access, review and commit."
        )
    unresolved = sorted(k for k, v in {**build_args(spec), **{a.name: a.sha256 for a in spec.artifacts}}.items()
                        if PLACEHOLDER_DIGEST[7:] in v)
    if unresolved:
        raise VerificationError(
            f"{spec.directory / 'image.yaml'} still has placeholder pins for {', '.join(unresolved)}; "
            "fill them (docs/images.md says where each comes from) before building."
        )
    lock = read_lock(spec.lock_path)
    if lock.status != STATUS_COMPLETE:
        raise VerificationError(
            f"{spec.lock_path} is a {lock.status} lock ({'; '.join(lock.notes) or 'see its header'}). "
            f"Complete it with `invoke lock --backend {spec.backend}` on a host that reaches every index it needs."
        )


# --- Dockerfile images -------------------------------------------------------------------


def _add_file(tar: tarfile.TarFile, path: Path, arcname: str, epoch: int) -> None:
    info = tar.gettarinfo(str(path), arcname=arcname)
    info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
    with open(path, "rb") as fh:
        tar.addfile(info, fh)


def _add_git_tree(tar: tarfile.TarFile, checkout: Path, commit: str, prefix: str, name: str, epoch: int) -> None:
    """`git archive` of exactly `commit` from checkout, under prefix/: the pinned tree, whatever is checked out."""
    from .sources import check_has_commit

    check_has_commit(checkout, commit, name)
    archive = subprocess.run(["git", "-C", str(checkout), "archive", "--format=tar", f"--prefix={prefix}/", commit],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as src:
        for member in src.getmembers():
            if member.type == tarfile.XGLTYPE or member.name == "pax_global_header":
                continue
            member.mtime, member.uid, member.gid, member.uname, member.gname = epoch, 0, 0, "", ""
            tar.addfile(member, src.extractfile(member) if member.isfile() else None)


def _package_files() -> list[Path]:
    """The package source and pyproject.toml as git lists them (tracked and untracked, not ignored)."""
    done = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "openjev_repro", "pyproject.toml"],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # an empty listing would build an image without the package
        raise DockerError(f"git ls-files in {REPO_ROOT} failed (the build context needs a git checkout): "
                          f"{done.stderr.strip()}")
    return [REPO_ROOT / p for p in done.stdout.split() if (REPO_ROOT / p).is_file()]


def _context_files(spec: ImageSpec) -> list[Path]:
    """images/common, the image's directory and the package source: every file, sorted, once."""
    paths = [p for p in (REPO_ROOT / "images" / "common").rglob("*") if p.is_file()]
    paths += [p for p in spec.directory.rglob("*") if p.is_file()]
    return sorted(set(paths + _package_files()))


def _context(spec: ImageSpec, wheels: Path | None = None, source: Path | None = None) -> io.BytesIO:
    """A build context holding only images/common, the image's directory and the package source;
    for images built from upstream code also wheels/ (the checked wheelhouse) and src/<name>/
    (`git archive` of each pinned commit of the checkout)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in _context_files(spec):
            _add_file(tar, path, str(path.relative_to(REPO_ROOT)), spec.source_date_epoch)
        if wheels is not None:
            for wheel in sorted(wheels.glob("*.whl")):
                _add_file(tar, wheel, f"wheels/{wheel.name}", spec.source_date_epoch)
        if source is not None:
            for src in spec.sources:
                _add_git_tree(tar, source, src.commit, f"src/{src.name}", src.name, spec.source_date_epoch)
    buf.seek(0)
    return buf


def build_args(spec: ImageSpec) -> dict[str, str]:
    args = {"BASE_IMAGE": spec.base or "", "SOURCE_DATE_EPOCH": str(spec.source_date_epoch)}
    if spec.cuda_arch:
        args["CUDA_ARCH"] = spec.cuda_arch
    for src in spec.sources:
        key = src.name.upper().replace("-", "_")
        args[f"{key}_URL"], args[f"{key}_COMMIT"] = src.url, src.commit
    for art in spec.artifacts:
        args[f"{art.name.upper().replace('-', '_')}_SHA256"] = art.sha256
    return {**args, **spec.build_args}


def _debian_base(spec: ImageSpec, progress: Progress, fresh: bool = False) -> tuple[str, str]:
    """Import the debootstrap base (cached tar) into docker; returns (repository:tag, diff ID sha256)."""
    base_tar, base_sha = _ensure_base(spec, progress, fresh)
    base_repo, base_tag = "openjev-repro/debian-base", f"{spec.debian_pin.suite}-{base_sha[:12]}"
    client = connect()
    import docker

    # already imported with exactly this layer: keep it (its image id, hence docker's build cache);
    # absent (docker.errors.ImageNotFound) or unreadable: import it
    with contextlib.suppress(docker.errors.DockerException, KeyError):
        if not fresh and client.images.get(f"{base_repo}:{base_tag}").attrs["RootFS"]["Layers"] == [f"sha256:{base_sha}"]:
            progress(f"base {base_repo}:{base_tag} already imported (diff ID sha256:{base_sha})")
            return f"{base_repo}:{base_tag}", base_sha
    _import(client, base_tar, base_repo, base_tag, [], base_sha)
    progress(f"imported base {base_repo}:{base_tag} (diff ID sha256:{base_sha})")
    return f"{base_repo}:{base_tag}", base_sha


def _check_source_given(spec: ImageSpec, source: Path | None, target: str | None) -> None:
    if spec.source_required and source is None and target in (None, "build", "runtime"):
        raise VerificationError(f"The {spec.name} image compiles upstream code: give --source (a checkout holding "
                                f"{', '.join(s.commit for s in spec.sources)}).")


def _debian_labels(spec: ImageSpec, progress: Progress, args: dict[str, str], fresh: bool) -> dict[str, str]:
    """With `debian:`, import our base, point BASE_IMAGE at it and return the labels naming it; else none."""
    if spec.debian is None:
        return {}
    base_ref, base_sha = _debian_base(spec, progress, fresh=fresh)
    args["BASE_IMAGE"] = base_ref
    return {"org.opencontainers.image.base.name": base_ref,
            "io.openjev-repro.base.diff-id": f"sha256:{base_sha}",
            "io.openjev-repro.debian.release-date": spec.debian.release_date}


def _checked_wheelhouse(spec: ImageSpec) -> Path | None:
    """The image's wheelhouse, filled and checked against its lock; None when the lock pins nothing."""
    if not (spec.lock_path.exists() and read_lock(spec.lock_path).pins):
        return None
    wheels = CACHE_DIR / "wheelhouse" / spec.name
    fill_wheelhouse(spec.lock_path, wheels, spec.python, spec.platform, pool=CACHE_DIR / "wheels",
                    pypi_only=spec.index == "pypi")
    verify_wheelhouse(spec.lock_path, wheels)
    return wheels


def _follow_build(stream: Iterable[dict], what: str, progress: Progress) -> None:
    """Pass docker build's output lines to progress; DockerError at its first error."""
    for chunk in stream:
        if "error" in chunk:
            raise DockerError(f"{what} failed: {chunk['error'].strip()}")
        if chunk.get("stream", "").strip():
            progress(chunk["stream"].rstrip())


def build_dockerfile(spec: ImageSpec, progress: Progress = print, no_cache: bool = False, source: Path | None = None,
                     target: str | None = None) -> dict:
    """docker build of images/<backend>/Dockerfile; on our Debian base when the recipe has `debian:`.
    target: stop at that stage (the native image's `toolchain` stage builds without upstream code)."""
    _check_pins(spec)
    _check_source_given(spec, source, target)
    client, started = connect(), time.monotonic()
    args = build_args(spec)
    extra_labels = _debian_labels(spec, progress, args, fresh=no_cache)
    wheels = _checked_wheelhouse(spec)
    final = target in (None, "runtime")
    tag = spec.tag if final else f"{spec.tag.rpartition(':')[0]}:{target}"
    dockerfile = str((spec.directory / spec.dockerfile).relative_to(REPO_ROOT))
    stream = client.api.build(fileobj=_context(spec, wheels, source), custom_context=True, dockerfile=dockerfile, tag=tag,
                              buildargs=args, labels=labels_for(spec, extra_labels), nocache=no_cache, rm=True,
                              decode=True, pull=False, target=target)
    _follow_build(stream, f"docker build of {spec.name}", progress)
    view = spec.model_copy(update={"tag": tag, "name": spec.name if final else f"{spec.name}-{target}"})
    return _write_record(view, client.images.get(tag), started, {"offline": False, "base": args["BASE_IMAGE"],
                                                                "target": target or "final"})


# --- the offline flavour -----------------------------------------------------------------

_INSTALL = """set -eu
python3 -m venv --without-pip /opt/venv
pip_whl=$(ls /usr/share/python-wheels/pip-*.whl)
/opt/venv/bin/python "$pip_whl/pip" install --quiet --no-index --no-compile --no-cache-dir \
    --disable-pip-version-check --find-links /wheels --require-hashes -r /lock/requirements.lock
mkdir -p /opt/openjev-repro && cp -r /src/openjev_repro /opt/openjev-repro/
# -f: rewrite every .pyc, including any an interpreter start wrote with a timestamp header
# (site-packages .pth files import _distutils_hack at startup). Some wheels ship files for newer Pythons (torch's py312 test helpers); those stay uncompiled.
/opt/venv/bin/python -m compileall -f -qq -j 0 --invalidation-mode unchecked-hash /opt/venv/lib /opt/openjev-repro \
    || echo "compileall: files with syntax for newer Pythons left uncompiled"
PYTHONPATH=/opt/openjev-repro /opt/venv/bin/python -c \
    "import torch, $CHECK_IMPORTS; print('import check ok', torch.__version__, torch.version.cuda)"
"""


def _stage_source(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "openjev_repro"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    for rel in listed:
        if (REPO_ROOT / rel).is_file() and "__pycache__" not in rel:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes((REPO_ROOT / rel).read_bytes())


def _ensure_base(spec: ImageSpec, progress: Progress, fresh: bool) -> tuple[Path, str]:
    pin = spec.debian_pin
    lock = spec.directory / pin.packages_lock
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tar = CACHE_DIR / f"debian-{pin.suite}-{hash_file(lock)[:12]}.tar"
    meta = tar.with_suffix(".sha256")
    if not fresh and tar.exists() and meta.exists():
        progress(f"base root filesystem from cache: {tar}")
        return tar, meta.read_text().strip()
    read_packages_lock(lock)  # refuse early when there is no pin at all
    base = make_base_tar(pin, lock, tar, spec.source_date_epoch, progress)
    meta.write_text(base.sha256 + "\n")
    return tar, base.sha256


def _import(client, tar: Path, repository: str, tag: str, changes: list[str], expect: str):
    import docker

    try:  # by file name: the SDK then sends it with a Content-Length (streams get chunked badly)
        client.api.import_image_from_file(str(tar), repository=repository, tag=tag, changes=changes)
    except docker.errors.APIError as exc:
        raise DockerError(f"docker import of {tar} failed: {exc.explanation or exc}.") from exc
    image = client.images.get(f"{repository}:{tag}")
    layers = image.attrs["RootFS"]["Layers"]
    if layers != [f"sha256:{expect}"]:
        raise VerificationError(f"docker recorded layers {layers} for {tar}, expected sha256:{expect}.")
    return image


def _run_install(client, base_ref: str, wheels: Path, lock: Path, src: Path, epoch: int, out_tar: Path, progress: Progress,
                 check_imports: tuple[str, ...] = ("transformers", "peft", "openjev_repro.backend")) -> None:
    env = {"SOURCE_DATE_EPOCH": str(epoch), "PYTHONDONTWRITEBYTECODE": "1", "CHECK_IMPORTS": ", ".join(check_imports)}
    container = client.containers.create(
        base_ref, ["sh", "-c", _INSTALL], network_mode="none", environment=env,
        volumes={str(wheels): {"bind": "/wheels", "mode": "ro"}, str(lock.parent): {"bind": "/lock", "mode": "ro"},
                 str(src): {"bind": "/src", "mode": "ro"}})
    try:
        container.start()
        status = container.wait()["StatusCode"]
        logs = container.logs().decode(errors="replace").strip()
        if status != 0:
            raise DockerError(f"Installing the locked wheels failed (exit {status}):\n{logs[-2000:]}")
        progress(logs.splitlines()[-1] if logs else "installed")
        with open(out_tar, "wb") as fh:
            fh.writelines(container.export())
    finally:
        container.remove(force=True)


def _offline_changes(spec: ImageSpec, base_sha: str) -> list[str]:
    """The `docker import --change` lines of the offline image: its environment, command and labels."""
    extra = {"io.openjev-repro.debian.release-date": spec.debian_pin.release_date,
             "io.openjev-repro.debian.packages.sha256": hash_file(spec.directory / spec.debian_pin.packages_lock),
             "io.openjev-repro.base.diff-id": f"sha256:{base_sha}",
             **{f"io.openjev-repro.source.{s.name}.included": "no" for s in spec.sources}}
    env = {**spec.env, **({UPSTREAM_ENV: "none"} if spec.sources else {})}
    changes = [f"ENV {k}={v}" for k, v in env.items()] + ([f"CMD {json.dumps(spec.cmd)}"] if spec.cmd else [])
    return changes + [f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in labels_for(spec, extra).items()]


def build_offline(spec: ImageSpec, progress: Progress = print, fresh_base: bool = False, tag: str | None = None,
                  source: Path | None = None) -> dict:
    """The CPU flavour with no registry: debootstrap base + local wheelhouse, deterministic single layer."""
    _check_pins(spec)
    client, started = connect(), time.monotonic()
    wheels = CACHE_DIR / "wheelhouse" / spec.name
    progress(f"wheelhouse {wheels}: fetching what is missing, then checking every hash against {spec.lock_path.name}")
    fill_wheelhouse(spec.lock_path, wheels, spec.python, spec.platform, pool=CACHE_DIR / "wheels",
                    pypi_only=spec.index == "pypi")
    verify_wheelhouse(spec.lock_path, wheels)
    base_ref, base_sha = _debian_base(spec, progress, fresh=fresh_base)
    tag = tag or spec.tag
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        src, raw, final = Path(tmp) / "src", Path(tmp) / "export.tar", Path(tmp) / "rootfs.tar"
        if source is None:
            _stage_source(src)
        else:
            src = source
        progress("installing locked wheels in a container without network")
        checks = tuple(m for m in spec.check_imports if m != "torch")
        _run_install(client, base_ref, wheels, spec.lock_path, src, spec.source_date_epoch, raw, progress,
                     checks)
        members = CACHE_DIR / f"{tag.replace('/', '_').replace(':', '_')}.members.json"
        sha = normalize_tar(raw, final, spec.source_date_epoch, members)
        progress(f"deterministic root filesystem: sha256 {sha}")
        repository, _, image_tag = tag.rpartition(":")
        image = _import(client, final, repository, image_tag, _offline_changes(spec, base_sha), sha)
    spec_view = spec.model_copy(update={"tag": tag})
    return _write_record(spec_view, image, started, {"offline": True, "rootfs_sha256": sha, "base_diff_id": f"sha256:{base_sha}",
                                                   "members": str(members), "debian_release_date": spec.debian_pin.release_date})


def source_tag(spec: ImageSpec) -> str:
    """The tag of the image with the upstream source layer: <repository>:<first source's short commit>."""
    return f"{spec.tag.rpartition(':')[0]}:{spec.sources[0].commit[:7]}"


def source_layer_dockerfile(spec: ImageSpec, base_ref: str) -> str:
    """FROM the environment image: COPY each pinned source to /opt/src/<name>, install it into /opt/venv
    with no network and no dependencies (everything it needs is already locked), label it as included."""
    lines = [f"FROM {base_ref}"]
    for src in spec.sources:
        lines += [f"COPY {src.name}/ /opt/src/{src.name}/",
                  # built from a scratch copy, so /opt/src/<name> stays exactly the commit's tree
                  (f"RUN cp -r /opt/src/{src.name} /tmp/build-{src.name} && pip_whl=$(ls /usr/share/python-wheels/pip-*.whl) "
                  '&& /opt/venv/bin/python "$pip_whl/pip" install --no-index --no-deps --no-build-isolation --no-compile '
                  f"--disable-pip-version-check /tmp/build-{src.name} && rm -rf /tmp/build-{src.name}"),
                  f'LABEL "io.openjev-repro.source.{src.name}.included"="yes"']
    upstream = " ".join(f"{s.name}@{s.commit}" for s in spec.sources)
    return "\n".join(lines + [f'ENV {UPSTREAM_ENV}="{upstream}"']) + "\n"


def add_source_layer(spec: ImageSpec, env_image: str, checkout: Path, progress: Progress = print) -> dict:
    """The upstream source layer on top of the environment image: `git archive` of each pinned commit
    from the checkout (the one `invoke prepare` made, or any clone holding the commits)."""
    client, started = connect(), time.monotonic()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = source_layer_dockerfile(spec, env_image).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mtime = len(data), spec.source_date_epoch
        tar.addfile(info, io.BytesIO(data))
        for src in spec.sources:
            _add_git_tree(tar, checkout, src.commit, src.name, src.name, spec.source_date_epoch)
    buf.seek(0)
    tag = source_tag(spec)
    progress(f"adding the upstream source layer ({', '.join(f'{s.name}@{s.commit[:7]}' for s in spec.sources)}) as {tag}")
    _follow_build(client.api.build(fileobj=buf, custom_context=True, tag=tag, rm=True, decode=True, pull=False,
                                   network_mode="none"), f"adding the source layer to {spec.name}", progress)
    return _write_record(spec.model_copy(update={"tag": tag, "name": f"{spec.name}-source"}), client.images.get(tag),
                         started, {"offline": True, "environment_image": env_image,
                                   "sources": {s.name: s.commit for s in spec.sources}})


def build(spec: ImageSpec, progress: Progress = print, no_cache: bool = False,
          source: Path | None = None, target: str | None = None) -> dict:
    """Build the image; with source (a checkout of the recipe's upstream source) add the source layer too.
    Returns the record of the last image built."""
    if spec.kind == "rootfs":
        record = build_offline(spec, progress, fresh_base=no_cache)
        if source is not None and spec.sources:
            record = add_source_layer(spec, record["image_id"], source, progress)
        elif spec.sources:
            progress(f"no upstream source given: {spec.tag} is the environment layer only "
                     f"({UPSTREAM_ENV}=none); add --source DIR (a checkout at {spec.sources[0].commit[:7]})")
        return record
    return build_dockerfile(spec, progress, no_cache, source=source, target=target)


def check_reproducible(spec: ImageSpec, progress: Progress = print) -> list:
    """Build the offline image twice from scratch (fresh debootstrap each time); [] when identical,
    else the differing files (path: what differs)."""
    if spec.kind != "rootfs":
        raise DockerError("--check-reproducible is implemented for the offline flavour (`--offline`) only.")
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        # One snapshot of the package source for both builds: the tree may change meanwhile.
        _stage_source(Path(tmp))
        first = build_offline(spec, progress, fresh_base=True, source=Path(tmp))
        second = build_offline(spec, progress, fresh_base=True, tag=spec.tag + "-check", source=Path(tmp))
    write_json_atomic(record_path(spec), first)  # the record names the first (same bytes, written atomically)
    progress(f"first  build: base {first['base_diff_id']}, image layer {first['diff_ids']}")
    progress(f"second build: base {second['base_diff_id']}, image layer {second['diff_ids']}")
    if first["diff_ids"] == second["diff_ids"]:
        return []
    return diff_members(read_members(Path(first["members"])), read_members(Path(second["members"])))

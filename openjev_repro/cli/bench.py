"""Invoke tasks for the benchmarks: bench-client, bench-hash, bench-calibrate, bench-audit.

Where results go: by default a new `.cache/bench/<name>-<UTC time>.json` (ignored by git, so a
benchmark never dirties the checkout that later runs record); `--out FILE` writes that file,
`--out ''` none, and `--record` replaces the committed `bench-results/<name>.json` (only when
asked: those files are the figures the README quotes). Each task says where it wrote. Long
benchmarks say, on stderr, what they do, which directory and disk their files use, and what
they left there.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import task

from ..errors import ReproError
from . import user_errors

if TYPE_CHECKING:
    from ..bench.machine import BenchResult

__all__ = ["bench_audit", "bench_calibrate", "bench_client", "bench_hash"]

RECORDED = Path("bench-results")  # the committed results, written only with --record
SCRATCH = Path(".cache/bench")  # the default: ignored by git
OUT_HELP = "result JSON to write (default: a new .cache/bench/{name}-<time>.json; '' for none)"
RECORD_HELP = "write the committed bench-results/{name}.json instead (the README's figures; then commit it)"


def _say(message: str) -> None:
    print(f"{message}", file=sys.stderr, flush=True)


def _result_path(name: str, out: str | None, record: bool) -> Path | None:
    if record and out is not None:
        raise ReproError("give --out or --record, not both (--record writes bench-results/ itself).")
    if record:
        return RECORDED / f"{name}.json"
    if out is not None:
        return Path(out) if out else None
    return SCRATCH / f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"


def _write(path: Path | None, result: BenchResult) -> None:
    if path is None:
        return
    result.write(path)
    print(f"wrote {path}" + ("  (committed figures: commit it with the README/docs that quote it)"
                             if path.parent == RECORDED else ""))


@task(help={"requests": "measured requests per client (default 2000)",
            "warmup": "untimed requests per client first (default 200)",
            "out": OUT_HELP.format(name="client"), "record": RECORD_HELP.format(name="client")})
@user_errors
def bench_client(c, requests=2000, warmup=200, out=None, record=False):
    """Raw socket vs the timed client vs httpx against a loopback server; p50/p99 and ratios."""
    from ..bench import run_client_bench

    path = _result_path("client", out, record)
    _say(f"bench-client: {requests} requests per client after {warmup} warm-up, on loopback")
    result = run_client_bench(int(requests), int(warmup))
    _write(path, result)
    print(result.table())


@task(help={"sizes": "comma-separated file sizes, binary units (default 1G,1G,1G,1G: 4 GiB on disk)",
            "dir": "where the generated files live (default ~/.cache/openjev-repro/bench-hash, reused by later runs)",
            "rounds": "timed rounds per side (default 3)",
            "workers": "hashing threads (default: usable cores)",
            "clean": "delete the generated files afterwards (the next run generates them again)",
            "out": OUT_HELP.format(name="hash"), "record": RECORD_HELP.format(name="hash")})
@user_errors
def bench_hash(c, sizes="1G,1G,1G,1G", dir="", rounds=3, workers=0, clean=False, out=None, record=False):
    """Our parallel SHA256 vs sha256sum on generated files, warm page cache; MB/s and ratios."""
    from ..bench import parse_sizes, run_hash_bench
    from ..bench.hash_bench import default_dir
    from ..bench.machine import gib

    path = _result_path("hash", out, record)
    directory = Path(dir) if dir else default_dir()
    try:
        result = run_hash_bench(parse_sizes(sizes), directory, int(rounds), int(workers) or None, say=_say)
    finally:
        if clean:
            for generated in _generated(directory):
                generated.unlink(missing_ok=True)
    _write(path, result)
    print(result.table())
    left = sum(p.stat().st_size for p in _generated(directory))
    _say(f"left {gib(left)} of benchmark files in {directory} (reused next time; delete them or pass --clean)"
         if left else f"left none of its files in {directory}")


def _generated(directory: Path) -> list[Path]:
    """The files bench-hash generates (by their name), never anything else in --dir."""
    return [p for p in directory.glob("hashbench-v1-*") if p.is_file()] if directory.is_dir() else []


@task(help={"requests": "measured requests (default 500)"})
@user_errors
def bench_calibrate(c, requests=500):
    """Print the client-overhead calibration a study records (TimedClient vs a no-op endpoint)."""
    from ..bench import calibrate_client_overhead

    print(json.dumps(calibrate_client_overhead(int(requests)), indent=2))


@task(
    name="bench-audit",
    help={
        "sizes": "comma-separated size factors of the source run (default 1,10,100,1000: about 250 MB at 1000)",
        "source": "signed run to scale up (default: the newest runs/demo-* that `make demo` wrote)",
        "rounds": "timed rounds per size (default 3)",
        "dir": "where the synthesised runs live while measured (default: the system temp directory)",
        "keep": "keep the synthesised runs (their directory is printed)",
        "out": OUT_HELP.format(name="audit"), "record": RECORD_HELP.format(name="audit"),
    }
)
@user_errors
def bench_audit(c, sizes="1,10,100,1000", source=None, rounds=3, dir="", keep=False, out=None, record=False):
    """import, verify, compare, report, publish on runs of 1x..1000x the demo: time and peak memory vs sha256sum."""
    from ..bench.audit_bench import default_source, parse_factors, run_audit_bench

    path = _result_path("audit", out, record)
    factors = parse_factors(sizes)
    result = run_audit_bench(factors, Path(source) if source else default_source(), Path(dir) if dir else None,
                             int(rounds), bool(keep), say=_say)
    from .output import print_markdown

    _write(path, result)
    print_markdown(result.markdown())  # a table at the terminal's width; the Markdown itself in a pipe
    if result.work_dir:
        print(f"kept: {result.work_dir}")
    else:
        _say("removed every synthesised run")

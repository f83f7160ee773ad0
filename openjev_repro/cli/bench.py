"""Invoke tasks for the overhead benchmarks: bench-client, bench-hash, bench-calibrate."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import task

from . import user_errors

__all__ = ["bench_audit", "bench_calibrate", "bench_client", "bench_hash"]


@task(
    help={
        "requests": "measured requests per client (default 2000)",
        "warmup": "untimed requests per client first (default 200)",
        "out": "result JSON to write (default bench-results/client.json; '' to skip)",
    }
)
@user_errors
def bench_client(c, requests=2000, warmup=200, out="bench-results/client.json"):
    """Raw socket vs the timed client vs httpx against a loopback server; p50/p99 and ratios."""
    from ..bench import format_client_table, run_client_bench, write_result

    result = run_client_bench(int(requests), int(warmup))
    if out:
        write_result(Path(out), result)
        print(f"wrote {out}")
    print(format_client_table(result))


@task(
    help={
        "sizes": "comma-separated file sizes, binary units (default 1G,1G,1G,1G)",
        "dir": "where the generated files live (default ~/.cache/openjev-repro/bench-hash)",
        "rounds": "timed rounds per side (default 3)",
        "workers": "hashing threads (default: usable cores)",
        "out": "result JSON to write (default bench-results/hash.json; '' to skip)",
    }
)
@user_errors
def bench_hash(c, sizes="1G,1G,1G,1G", dir="", rounds=3, workers=0, out="bench-results/hash.json"):
    """Our parallel SHA256 vs sha256sum on generated files, warm page cache; MB/s and ratios."""
    from ..bench import format_hash_table, parse_sizes, run_hash_bench, write_result

    result = run_hash_bench(parse_sizes(sizes), Path(dir) if dir else None, int(rounds), int(workers) or None)
    if out:
        write_result(Path(out), result)
        print(f"wrote {out}")
    print(format_hash_table(result))


@task(help={"requests": "measured requests (default 500)"})
@user_errors
def bench_calibrate(c, requests=500):
    """Print the client-overhead calibration a study records (TimedClient vs a no-op endpoint)."""
    from ..bench import calibrate_client_overhead

    print(json.dumps(calibrate_client_overhead(int(requests)), indent=2))


@task(
    name="bench-audit",
    help={
        "sizes": "comma-separated size factors of the source run (default 1,10,100,1000)",
        "source": "signed run to scale up (default: the newest runs/demo-* that `make demo` wrote)",
        "rounds": "timed rounds per size (default 3)",
        "dir": "where the synthesised runs live while measured (default: the system temp directory)",
        "keep": "keep the synthesised runs (their directory is printed)",
        "out": "result JSON to write (default bench-results/audit.json; '' to skip)",
    }
)
@user_errors
def bench_audit(c, sizes="1,10,100,1000", source=None, rounds=3, dir="", keep=False, out="bench-results/audit.json"):
    """import, verify, compare, report, publish on runs of 1x..1000x the demo: time and peak memory vs sha256sum."""
    from ..bench.audit_bench import default_source, format_audit_table, parse_factors, run_audit_bench

    factors = parse_factors(sizes)
    result = run_audit_bench(factors, Path(source) if source else default_source(), Path(dir) if dir else None,
                             int(rounds), bool(keep))
    if out:
        from ..bench import write_result

        write_result(Path(out), result)
        print(f"wrote {out}")
    print(format_audit_table(result))
    if result.get("work_dir"):
        print(f"kept: {result['work_dir']}")

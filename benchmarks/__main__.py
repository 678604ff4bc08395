"""Entry command: ``python -m benchmarks {all|NAME ...} [--quick] [--json FILE]``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

from benchmarks.table import Table

# Benchmark name -> module under benchmarks/ exposing ``run(quick: bool) -> list[Table]``.
BENCHMARKS = {
    "startup": "benchmarks.bench_startup",
    "passes": "benchmarks.bench_passes",
    "kernels": "benchmarks.bench_kernels",
    "attention": "benchmarks.bench_attention",
    "e2e": "benchmarks.bench_e2e",
    "numerics": "benchmarks.bench_numerics",
    "profile": "benchmarks.bench_profile",
    "topology": "benchmarks.bench_topology",
    "config": "benchmarks.bench_config",
    "ranks": "benchmarks.bench_ranks",
    "serve": "benchmarks.bench_serve",
}


def run_benchmark(name: str, quick: bool) -> list[Table]:
    """Import and run one benchmark by name."""
    module = importlib.import_module(BENCHMARKS[name])
    tables: list[Table] = module.run(quick=quick)
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="+", choices=["all", *BENCHMARKS], help="what to run")
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write every table as JSON")
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if "all" in args.names else list(dict.fromkeys(args.names))
    results: dict[str, list[Table]] = {}
    for name in names:
        start = time.perf_counter()
        tables = run_benchmark(name, args.quick)
        results[name] = tables
        for table in tables:
            print(table.to_markdown())
        print(f"({name}: {time.perf_counter() - start:.1f} s)\n", flush=True)
    if args.json:
        payload = {name: [t.to_dict() for t in tables] for name, tables in results.items()}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

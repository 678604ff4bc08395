"""Entry command: ``python -m benchmarks {all|NAME ...} [--quick] [--json FILE]
[--model-dir DIR] [--models NAME,...] [--rounds N]``."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import time
from typing import Any

from vllm_ascend.checkpoints.smollm2 import ModelPackageMissing

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
    "graphs": "benchmarks.bench_graphs",
    "graph-memory": "benchmarks.bench_graph_memory",
}


def run_benchmark(name: str, quick: bool, **options: Any) -> list[Table]:
    """Import and run one benchmark by name; ``options`` (those not None) go to the benchmarks
    whose ``run`` takes them."""
    module = importlib.import_module(BENCHMARKS[name])
    accepted = inspect.signature(module.run).parameters
    given = {key: value for key, value in options.items()
             if value is not None and key in accepted}
    tables: list[Table] = module.run(quick=quick, **given)
    return tables


def _check_options(names: list[str], options: dict[str, Any]) -> None:
    """Every option given is taken by at least one chosen benchmark (no option is ignored
    silently)."""
    for key, value in options.items():
        if value is None:
            continue
        takers = [n for n in names if key in inspect.signature(
            importlib.import_module(BENCHMARKS[n]).run).parameters]
        if not takers:
            flag = "--" + key.replace("_", "-")
            allowed = [n for n in BENCHMARKS if key in inspect.signature(
                importlib.import_module(BENCHMARKS[n]).run).parameters]
            raise SystemExit(f"{flag} applies to: {', '.join(allowed)}; the chosen benchmarks "
                             f"({', '.join(names)}) take no {flag}")


def _model_names(text: str) -> list[str]:
    """``--models``: comma-separated names of the e2e models (startup takes the same)."""
    from benchmarks.bench_e2e import MODELS

    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: allowed are comma-separated names from {', '.join(MODELS)}")
    return names


def _positive_int(text: str) -> int:
    """``--rounds``: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of at least 1 is needed")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="+", choices=["all", *BENCHMARKS], help="what to run")
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write every table as JSON")
    parser.add_argument("--model-dir", metavar="DIR",
                        help="e2e, startup: the real model's checkpoint directory "
                             "(SmolLM2-135M-Instruct)")
    parser.add_argument("--models", metavar="NAME,...", type=_model_names,
                        help="e2e, startup: some of qwen3,qwen3_moe,smollm2 (default: all)")
    parser.add_argument("--rounds", metavar="N", type=_positive_int,
                        help="e2e: rounds per model instead of the size's own; startup: repeats")
    parser.add_argument("--tp", metavar="N", type=_positive_int,
                        help="graph-memory: tensor-parallel ranks (emulated NPUs; default 1)")
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if "all" in args.names else list(dict.fromkeys(args.names))
    options = {"model_dir": args.model_dir, "models": args.models, "rounds": args.rounds,
               "tp": args.tp}
    _check_options(names, options)
    if args.model_dir is not None:
        from benchmarks.e2e_real import check_model_dir

        try:
            check_model_dir(args.model_dir)
        except FileNotFoundError as error:
            parser.error(str(error))
    results: dict[str, list[Table]] = {}
    for name in names:
        start = time.perf_counter()
        try:
            tables = run_benchmark(name, args.quick, **options)
        except ModelPackageMissing as error:  # the real model's package or its converter
            parser.exit(2, f"{parser.prog} {name}: {error}\n")
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

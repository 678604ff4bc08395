#!/usr/bin/env python3
"""Run every test suite of the workspace, each in its own pytest process, and sum the results.

One process per suite keeps memory bounded (in-process vLLM engines and large tensors of one
suite are freed with its process) and mirrors the per-package CI jobs. The end-to-end suite is
split into shards (files sharing a session engine stay together), and ``--jobs N`` processes
run at once (default: two, one per core of the CI machine; most of an engine's start-up, the
imports, Dynamo and Inductor, is single-threaded, so one suite alone leaves a core idle). Each
process's output is printed whole when it ends. Other arguments are passed to every pytest
run, e.g. ``python tools/run_tests.py -x`` or ``--jobs 1 -k fusion``.
Exit status is non-zero when any suite fails or collects no test; the closing line then never
says "0 failed": a suite whose process crashed (killed by a signal, or a non-zero exit without
pytest's summary) counts as one failure there and is named.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = (
    "packages/ascend-config/tests",
    "packages/ascend-topology/tests",
    "packages/ascend-kernels/tests",
    "packages/ascend-graph/tests",
    "packages/vllm-ascend/tests",
    "packages/vllm-ascend-testing/tests",
    "packages/torch-npu-double/tests",
    "tools/tests",
    "benchmarks/tests",
    "tests/integration",
)
INTEGRATION = "tests/integration"
# Shards of the end-to-end suite; each is one pytest process. Files that share a session
# engine (``compiled_runs``: fusion, HF reference, parallel) are one shard so the engine is
# built once. Files listed nowhere form one more shard (a new file always runs).
INTEGRATION_SHARDS: tuple[tuple[str, ...], ...] = (
    ("test_fusion_e2e.py", "test_hf_reference.py", "test_parallel.py"),
    ("test_npu_runtime.py", "test_npu_graphs.py"),
    # one session's tiny Qwen3-MoE checkpoint for both MoE files
    ("test_expert_parallel.py", "test_npu_moe.py", "test_tp_real_model.py"),
    ("test_demo.py", "test_serve.py", "test_serve_strict.py"),
    ("test_numerics_smollm2.py", "test_serve_real_model.py"),
    ("test_custom_ops_e2e.py", "test_batch_invariance.py", "test_quant_fusion.py",
     "test_w8a8_modelslim.py"),
    ("test_cli_errors.py", "test_smollm2_checkpoint.py", "test_compile_after_ready.py",
     "test_warm_start.py", "test_plugin_discovery.py"),
)
# Rough seconds of each suite and end-to-end file (`--durations`, 2026-12-06). Only the order
# of the processes depends on them: the longest start first, so that no long one is left to
# run alone at the end. Anything not listed counts as DEFAULT_SECONDS.
SECONDS = {
    "packages/vllm-ascend/tests": 290, "packages/ascend-kernels/tests": 66,
    "packages/vllm-ascend-testing/tests": 15, "packages/torch-npu-double/tests": 70,
    "tools/tests": 30,
    "packages/ascend-graph/tests": 28, "packages/ascend-config/tests": 20,
    "packages/ascend-topology/tests": 13, "benchmarks/tests": 90,
    "test_parallel.py": 320, "test_fusion_e2e.py": 150, "test_npu_runtime.py": 460,
    "test_npu_graphs.py": 330, "test_numerics_smollm2.py": 150, "test_expert_parallel.py": 140,
    "test_npu_moe.py": 150,
    "test_tp_real_model.py": 180, "test_demo.py": 190, "test_serve.py": 150,
    "test_custom_ops_e2e.py": 90, "test_batch_invariance.py": 95, "test_cli_errors.py": 180,
    "test_quant_fusion.py": 80, "test_compile_after_ready.py": 75, "test_warm_start.py": 70,
    "test_plugin_discovery.py": 70, "test_serve_worker_death.py": 130,
    "test_data_parallel.py": 150, "test_serve_real_model.py": 50, "test_serve_load.py": 50,
    "test_serve_strict.py": 45, "test_smollm2_checkpoint.py": 45, "test_seed_wiring.py": 35,
    "test_npu_binding.py": 120, "test_kv_cache_advice_e2e.py": 20,
    "test_w8a8_modelslim.py": 90,
}
DEFAULT_SECONDS = 5
# Set for every pytest process (and so for the engines it starts) unless the caller's
# environment sets them. Two suites at once on two cores, each engine with an OpenMP thread per
# core: torch's OpenMP threads that spin while they wait take the core the other process needs
# (two processes of small matmuls, two threads each, on the 2-core host: 54 s spinning, 20 s
# passive, 18 s with one thread each).
CHILD_ENV_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


@dataclass(frozen=True)
class Unit:
    """One pytest process: the suite it counts toward, a label, the paths it runs and its
    rough seconds (for the order only)."""

    suite: str
    label: str
    paths: tuple[str, ...]
    seconds: float = DEFAULT_SECONDS


def integration_shards(folder: Path, shards: Sequence[Sequence[str]] = INTEGRATION_SHARDS
                       ) -> list[tuple[str, ...]]:
    """The end-to-end suite's test files in shards: the listed ones that exist, then one
    shard of every file listed nowhere (a new file always runs)."""
    present = sorted(p.name for p in folder.glob("test_*.py"))
    listed = {name for shard in shards for name in shard}
    result = [tuple(n for n in shard if n in present) for shard in shards]
    result.append(tuple(n for n in present if n not in listed))
    return [shard for shard in result if shard]


def units(suites: Sequence[str], cwd: Path) -> list[Unit]:
    """The pytest processes of ``suites``, the longest first (the end-to-end suite's shards
    among them)."""
    found: list[Unit] = []
    for suite in suites:
        if suite == INTEGRATION and (cwd / suite).is_dir():
            shards = integration_shards(cwd / suite)
            found += [Unit(suite, f"{suite} [{i}/{len(shards)}]",
                           tuple(f"{suite}/{name}" for name in shard),
                           sum(SECONDS.get(name, DEFAULT_SECONDS) for name in shard))
                      for i, shard in enumerate(shards, 1)]
        else:
            found.append(Unit(suite, suite, (suite,), SECONDS.get(suite, DEFAULT_SECONDS)))
    return sorted(found, key=lambda unit: -unit.seconds)  # stable: ties keep their order


_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_KINDS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")


def summary_counts(output: str) -> Counter[str]:
    """Counts from pytest's closing summary line (the last line that has any)."""
    for line in reversed(output.splitlines()):
        found = _SUMMARY.findall(line)
        if found and (" in " in line or line.startswith("=")):
            return Counter(
                {
                    kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                    for n, kind in found
                }
            )
    return Counter()


def child_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a pytest process: ``environ`` (default: this process's) with
    ``CHILD_ENV_DEFAULTS`` for the names it does not set."""
    return {**CHILD_ENV_DEFAULTS, **(dict(os.environ) if environ is None else environ)}


def run_suite(paths: Sequence[str], extra: list[str], cwd: Path = ROOT
              ) -> tuple[int, Counter[str], float, str]:
    """Run one pytest process over ``paths``; (exit status, counts, seconds, its output)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *paths, "--durations=10", *extra],
        cwd=cwd,
        env=child_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    output = proc.stdout
    return proc.returncode, summary_counts(output), time.perf_counter() - start, output


@dataclass(frozen=True)
class SuiteResult:
    """One suite's pytest process: exit status (negative: killed by that signal) and counts."""

    suite: str
    status: int
    counts: Counter[str]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 0 and self.counts["passed"] > 0

    @property
    def crash(self) -> str | None:
        """How the suite's process crashed (killed by a signal; a non-zero exit without pytest's
        summary line), or None."""
        if self.status < 0:
            try:
                name = signal.Signals(-self.status).name
            except ValueError:
                name = f"signal {-self.status}"
            return f"killed by {name}, exit {self.status}"
        if self.status != 0 and not self.counts:
            return f"exit {self.status}, no summary"
        return None

    @property
    def uncounted(self) -> bool:
        """Failed while pytest counted no failure: a crash, or no test passed."""
        return not self.ok and (self.crash is not None
                                or self.counts["failed"] + self.counts["error"] == 0)

    def failures(self) -> int:
        """Failed tests and errors; a crash, or a failure pytest did not count, adds one."""
        return self.counts["failed"] + self.counts["error"] + (1 if self.uncounted else 0)

    def verdict(self) -> str:
        if self.ok:
            return "ok"
        return f"CRASHED ({self.crash})" if self.crash else f"FAILED (exit {self.status})"


def format_totals(totals: Counter[str]) -> str:
    """The plain closing line: 'N passed, N failed' then the other non-zero kinds."""
    parts = [f"{totals['passed']} passed", f"{totals['failed'] + totals['error']} failed"]
    parts += [f"{totals[k]} {k}" for k in ("skipped", "xfailed", "xpassed") if totals[k]]
    return ", ".join(parts)


def closing_line(results: list[SuiteResult]) -> str:
    """Totals over every suite; a crashed suite (or one where no test passed) counts as one
    more failure and is named."""
    totals: Counter[str] = Counter()
    for result in results:
        totals.update(result.counts)
        totals["failed"] += result.failures() - result.counts["failed"] - result.counts["error"]
    line = format_totals(totals)
    crashed = [f"{r.suite} ({r.crash})" for r in results if r.crash is not None]
    empty = [r.suite for r in results if r.uncounted and r.crash is None]
    if crashed:
        line += f"; crashed: {', '.join(crashed)}"
    if empty:
        line += f"; no test passed: {', '.join(empty)}"
    return line


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of at least 1 is needed")
    return int(text)


def parse_args(argv: list[str]) -> tuple[int, list[str]]:
    """``--jobs N`` (processes at once; default two, or one on a one-core host) and the
    arguments for pytest."""
    parser = argparse.ArgumentParser(
        prog="run_tests.py", allow_abbrev=False, add_help=False,
        description="Run every test suite; arguments other than --jobs go to pytest.")
    parser.add_argument("--jobs", type=_jobs, default=min(2, os.cpu_count() or 1))
    known, extra = parser.parse_known_args(argv)
    return known.jobs, extra


def main(argv: list[str] | None = None, suites: tuple[str, ...] = SUITES,
         cwd: Path = ROOT) -> int:
    jobs, extra = parse_args(list(sys.argv[1:] if argv is None else argv))
    todo = units(suites, cwd)
    # Each process gets its own pytest base temp: pytest prunes old numbered temp folders of
    # the same user, and two processes at once would remove each other's.
    own_temp = not any(arg.startswith("--basetemp") for arg in extra)
    temp_root = Path(tempfile.mkdtemp(prefix="run-tests-"))
    lock = threading.Lock()
    print(f"{len(todo)} pytest processes, {jobs} at once", flush=True)

    def run(index: int, unit: Unit) -> SuiteResult:
        temp = [f"--basetemp={temp_root / str(index)}"] if own_temp else []
        with lock:
            print(f"--> started: {unit.label}", flush=True)
        status, counts, seconds, output = run_suite(unit.paths, [*temp, *extra], cwd)
        with lock:
            print(f"\n==> {unit.label}\n{output}", end="", flush=True)
        return SuiteResult(unit.label, status, counts, seconds)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run, range(len(todo)), todo))
    ok = all(r.ok for r in results)
    if ok:
        shutil.rmtree(temp_root, ignore_errors=True)
    elif own_temp:
        print(f"\npytest temp folders (numbered as started) kept in {temp_root}")
    print("\nsuite results:")
    for r in results:
        print(f"  {r.suite:<34} {r.verdict():<18} {format_totals(r.counts):<40} "
              f"{r.seconds:6.1f} s")
    print(closing_line(results))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

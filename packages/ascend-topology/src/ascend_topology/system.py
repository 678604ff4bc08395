"""Readers for the operating-system side of a host: commands, NUMA, SMT, affinity, threads."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ascend_topology.cpulist import check_cpu_id, check_cpu_ids, parse_cpu_list
from ascend_topology.errors import CommandError, ParseError, TopologyError
from ascend_topology.safe_io import RECORDED_FILE_LIMIT, SYSFS_FILE_LIMIT, read_limited

SYS_NODE_ROOT = Path("/sys/devices/system/node")
SYS_CPU_ROOT = Path("/sys/devices/system/cpu")
PROC_ROOT = Path("/proc")
DEFAULT_TIMEOUT_S = 30.0
_NODE_DIR = re.compile(r"^node(\d+)$")
_C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LC_MESSAGES": "C"}


def run_command(
    args: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    limit: int = RECORDED_FILE_LIMIT,
) -> str:
    """Run ``args`` without a shell in the C locale and return its stdout.

    Raises ``CommandError`` (one line) when the program is missing, fails, exceeds
    ``timeout`` seconds or prints more than ``limit`` bytes (the child is killed in both
    cases). stderr is discarded.
    """
    if not args:
        raise CommandError("run_command needs a program name")
    env = dict(os.environ if environ is None else environ)
    env.update(_C_LOCALE)
    shown = " ".join(args)
    try:
        proc = subprocess.Popen(
            list(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except FileNotFoundError:
        raise CommandError(f"'{args[0]}' was not found on PATH (needed for `{shown}`)") from None
    except OSError as exc:
        raise CommandError(f"`{shown}` could not run: {exc.strerror or exc}") from None
    with proc:
        try:
            out = _bounded_output(proc, timeout, limit)
        except _Overrun as exc:
            proc.kill()
            proc.wait()
            raise CommandError(f"`{shown}` {exc}") from None
    if proc.returncode != 0:
        raise CommandError(f"`{shown}` exited with status {proc.returncode}")
    return out.decode("utf-8", errors="replace")


class _Overrun(Exception):
    """The child ran past its deadline or printed past its limit (the message says which)."""


def _bounded_output(proc: subprocess.Popen[bytes], timeout: float, limit: int) -> bytes:
    """Read the child's stdout until EOF and reap it; ``_Overrun`` past ``timeout`` seconds
    or ``limit`` bytes."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    late = _Overrun(f"did not finish within {timeout:g} s")
    out = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise late
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
            if len(out) > limit:
                raise _Overrun(f"printed more than {limit} bytes")
    try:
        proc.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        raise late from None
    return bytes(out)


def parse_lscpu_nodes(text: str) -> dict[int, list[int]]:
    """NUMA node -> CPUs from ``lscpu -e=CPU,NODE`` (rows of two integers; others skipped).

    A CPU listed under two nodes raises ``ParseError`` naming both rows."""
    nodes: dict[int, set[int]] = {}
    row_of: dict[int, tuple[int, int]] = {}  # CPU -> (node, line)
    for number, line in enumerate(text.replace("\ufeff", "").splitlines(), 1):
        tokens = line.split()
        if len(tokens) < 2 or not all(t.isdigit() and t.isascii() for t in tokens[:2]):
            continue
        if len(tokens[0]) > 5 or len(tokens[1]) > 5:
            continue
        cpu = check_cpu_id(int(tokens[0]), "lscpu -e=CPU,NODE: CPU")
        node, (other, at) = int(tokens[1]), row_of.setdefault(cpu, (int(tokens[1]), number))
        if other != node:
            raise ParseError(f"lscpu -e=CPU,NODE: CPU {cpu} is in NUMA node {other} (line "
                             f"{at}) and in NUMA node {node} (line {number})")
        nodes.setdefault(node, set()).add(cpu)
    if not nodes:
        raise ParseError("lscpu -e=CPU,NODE: no 'CPU NODE' rows of two integers found")
    return {node: sorted(cpus) for node, cpus in sorted(nodes.items())}


def parse_threads_per_core(text: str) -> int | None:
    """``Thread(s) per core:`` from plain ``lscpu`` output, or None when absent."""
    for line in text.splitlines():
        if "Thread(s) per core:" in line:
            value = line.partition(":")[2].strip()
            if value.isdigit() and value.isascii() and len(value) < 4 and int(value) > 0:
                return int(value)
    return None


def read_numa_sysfs(root: Path = SYS_NODE_ROOT) -> dict[int, list[int]]:
    """NUMA node -> CPUs from ``/sys/devices/system/node/node*/cpulist`` ({} when absent)."""
    nodes: dict[int, list[int]] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return {}
    for entry in entries:
        match = _NODE_DIR.match(entry.name)
        if not match:
            continue
        try:
            cpus = parse_cpu_list(read_limited(entry / "cpulist", SYSFS_FILE_LIMIT))
        except (OSError, TopologyError):
            continue
        if cpus:  # memory-only nodes have no CPUs to plan with
            nodes[int(match.group(1))] = cpus
    return dict(sorted(nodes.items()))


def read_numa(root: Path = SYS_NODE_ROOT) -> tuple[dict[int, list[int]], str | None]:
    """NUMA layout from sysfs, else from ``lscpu -e=CPU,NODE``; also returns the lscpu text.

    The lscpu text is returned (else None) so that ``capture`` can record it.
    """
    nodes = read_numa_sysfs(root)
    if nodes:
        return nodes, None
    text = run_command(["lscpu", "-e=CPU,NODE"])
    return parse_lscpu_nodes(text), text


def read_threads_per_core(cpu_root: Path = SYS_CPU_ROOT) -> int:
    """SMT threads per core: sysfs sibling list of cpu0, else ``lscpu``, else 1."""
    for cpu_dir in sorted(cpu_root.glob("cpu[0-9]*"))[:1]:
        try:
            siblings = parse_cpu_list(read_limited(
                cpu_dir / "topology" / "thread_siblings_list", SYSFS_FILE_LIMIT))
        except (OSError, TopologyError):
            break
        if siblings:
            return len(siblings)
    try:
        return parse_threads_per_core(run_command(["lscpu"])) or 1
    except TopologyError:
        return 1


def read_allowed_cpus(pid: int = 0) -> list[int]:
    """CPUs the process may run on (``os.sched_getaffinity``; 0 = this process)."""
    try:
        cpus = os.sched_getaffinity(pid)
    except OSError as exc:
        raise TopologyError(f"cannot read the CPU affinity of process {pid}: {exc}") from None
    return check_cpu_ids(cpus, "allowed CPUs")


def read_thread_names(pid: int, proc_root: Path = PROC_ROOT) -> dict[int, str]:
    """Thread id -> name (``/proc/<pid>/task/*/comm``) of one process; threads that exit
    while being read are left out."""
    names: dict[int, str] = {}
    try:
        tasks = sorted((proc_root / str(pid) / "task").iterdir())
    except OSError as exc:
        raise TopologyError(f"cannot list the threads of process {pid}: {exc.strerror}") from None
    for task in tasks:
        if not (task.name.isascii() and task.name.isdigit()):
            continue
        try:
            names[int(task.name)] = read_limited(task / "comm", SYSFS_FILE_LIMIT).strip()
        except (OSError, TopologyError):
            continue
    return names


def find_threads_named(name: str, proc_root: Path = PROC_ROOT) -> list[int]:
    """Thread ids, in any visible process, whose name is ``name`` (sorted)."""
    found: list[int] = []
    for comm in sorted(proc_root.glob("[0-9]*/task/[0-9]*/comm")):
        try:
            if read_limited(comm, SYSFS_FILE_LIMIT).strip() == name:
                found.append(int(comm.parent.name))
        except (OSError, TopologyError):
            continue
    return sorted(found)

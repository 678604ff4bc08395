"""The host: CPUs and NUMA nodes, the CPU-binding plan, huge pages, free memory."""

from __future__ import annotations

import os
import re
from typing import Any

from vllm_ascend.doctor.findings import FAIL, INFO, NPU, OK, WARN, Finding
from vllm_ascend.doctor.host_paths import HostPaths

GiB = 1 << 30
# Below this much available memory even a small model on the host CPU is likely to fail.
LOW_MEMORY_BYTES = 2 * GiB
THP_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
# /proc/meminfo is about 1.5 KiB (some 50 lines); a file this large is not one.
MEMINFO_LIMIT = 64 << 10
_MEMINFO = re.compile(r"(\w+):\s+(\d+)(\s+kB)?\s*")


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as bytes (``kB`` fields) or counts; the first line of a name counts."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        found = _MEMINFO.fullmatch(line)
        if found and found.group(1) not in values:
            values[found.group(1)] = int(found.group(2)) * (1024 if found.group(3) else 1)
    return values


def check_cpus(facts: Any | None) -> Finding:
    if facts is not None:
        cpus, numa = list(facts.allowed_cpus), {n: list(c) for n, c in facts.numa.items()}
    else:
        from ascend_topology.system import read_numa

        cpus = sorted(os.sched_getaffinity(0))
        numa = read_numa()[0]
    nodes = ", ".join(f"node {n}: {len(c)} CPUs" for n, c in sorted(numa.items()))
    return Finding("cpus", INFO, f"{len(cpus)} CPUs allowed, {len(numa)} NUMA node(s) ({nodes})",
                   details={"allowed": len(cpus), "numa_nodes": len(numa)})


def check_binding(facts: Any | None) -> Finding:
    if facts is None:
        return Finding("cpu-binding", INFO, "no NPU, so no CPU-binding plan (the host-CPU "
                       "platform uses vLLM's CPU worker placement)")
    import ascend_topology as topo

    try:
        plan = topo.plan(facts, topo.PlanOptions())
    except topo.TopologyError as exc:
        return Finding("cpu-binding", WARN, f"no CPU-binding plan: {exc}", scope=NPU,
                       fix='additional_config {"enable_cpu_binding": false} to skip binding')
    if plan.reason:
        return Finding("cpu-binding", WARN, f"CPU binding will be skipped: {plan.reason}",
                       scope=NPU, details={"plan": plan.to_dict()})
    rows = "; ".join(f"NPU {p.npu}: CPUs {p.main[0]}-{p.main[-1]}" if p.main else f"NPU {p.npu}"
                     for p in plan.npus)
    return Finding("cpu-binding", OK, f"ascend-topology plan ({plan.mode}): {rows}", scope=NPU,
                   details={"plan": plan.to_dict()})


def check_huge_pages(paths: HostPaths, meminfo: dict[str, int]) -> Finding:
    thp_text = paths.read_text(THP_FILE, 4096) or ""
    found = re.search(r"\[(\w+)\]", thp_text)
    thp = found.group(1) if found else "unknown"
    total, free = meminfo.get("HugePages_Total", 0), meminfo.get("HugePages_Free", 0)
    size = meminfo.get("Hugepagesize", 0)
    summary = (f"transparent huge pages: {thp}; reserved huge pages: {total} of "
               f"{size // 1024} KiB, {free} free")
    if thp == "never":
        return Finding("huge-pages", WARN, summary + " (large host tensors use 4 KiB pages)",
                       fix=f"echo madvise > {THP_FILE} (as root)")
    return Finding("huge-pages", INFO, summary)


def check_memory(meminfo: dict[str, int]) -> Finding:
    available, total = meminfo.get("MemAvailable"), meminfo.get("MemTotal")
    if available is None or total is None:
        return Finding("memory", WARN, "cannot read MemAvailable from /proc/meminfo")
    summary = f"{available / GiB:.1f} GiB available of {total / GiB:.1f} GiB"
    if available < LOW_MEMORY_BYTES:
        return Finding("memory", FAIL, summary + f"; less than {LOW_MEMORY_BYTES // GiB} GiB "
                       "leaves no room for a model, its KV cache and vLLM",
                       fix="stop other processes or use a host with more memory")
    return Finding("memory", OK, summary, details={"available": available, "total": total})


def host_findings(paths: HostPaths, facts: Any | None) -> list[Finding]:
    meminfo = parse_meminfo(paths.read_text("/proc/meminfo", MEMINFO_LIMIT) or "")
    return [check_cpus(facts), check_binding(facts), check_huge_pages(paths, meminfo),
            check_memory(meminfo)]

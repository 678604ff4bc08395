"""Planning time of ``ascend_topology.plan`` on synthetic hosts, and how it grows with CPUs.

Run: ``python -m benchmarks topology [--quick]``. Medians of many calls per size, all sizes
measured side by side in one run; the verdicts compare times measured in this same run.
"""

from __future__ import annotations

import statistics
import time

from ascend_topology import HostFacts, PlanOptions, make_synthetic_host, plan

from benchmarks.table import Table

TARGET_MS = 5.0
TARGET_HOST = (16, 640, 8)  # NPUs, CPUs, NUMA nodes


def _median_ms(facts: HostFacts, options: PlanOptions, budget_s: float) -> float:
    plan(facts, options)  # warm-up
    start = time.perf_counter()
    one = time.perf_counter() - start
    plan(facts, options)
    one = max(time.perf_counter() - start - one, 1e-6)
    batch = max(1, int(0.005 / one))  # batches of ~5 ms keep timer noise small
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < 5 or (time.perf_counter() < deadline and len(samples) < 200):
        t0 = time.perf_counter()
        for _ in range(batch):
            plan(facts, options)
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples) * 1000.0


def _growth_table(quick: bool) -> Table:
    npu_counts = (16,) if quick else (8, 16, 64)
    cpu_counts = (128, 640) if quick else (128, 256, 512, 640, 1024)
    budget = 0.02 if quick else 0.3
    options = PlanOptions()
    rows: list[list[object]] = []
    notes: list[str] = []
    target_ms = None
    for npus in npu_counts:
        times = {}
        for cpus in cpu_counts:
            facts = make_synthetic_host(npus=npus, cpus=cpus, numa_nodes=8)
            ms = _median_ms(facts, options, budget)
            times[cpus] = ms
            if (npus, cpus, 8) == TARGET_HOST:
                target_ms = ms
            ratio = ms / times[cpu_counts[0]]
            rows.append([npus, cpus, 8, round(ms, 4), round(1000 * ms / cpus, 3),
                         f"{ratio:.2f}x (CPUs {cpus / cpu_counts[0]:.1f}x)"])
        lo, hi = cpu_counts[0], cpu_counts[-1]
        growth, cpu_growth = times[hi] / times[lo], hi / lo
        linear = growth <= cpu_growth * 1.25
        verdict = "OK (no worse than linear)" if linear else "WORSE than linear"
        notes.append(f"{npus} NPUs: {lo}->{hi} CPUs ({cpu_growth:.1f}x) costs {growth:.2f}x time: "
                     f"{verdict}")
    if target_ms is not None:
        verdict = "OK" if target_ms < TARGET_MS else "MISSED"
        notes.insert(0, f"target: plan 16 NPUs / 640 CPUs / 8 NUMA in < {TARGET_MS:g} ms; "
                        f"median {target_ms:.3f} ms: {verdict}")
    notes.append("A2 policy (topology affinity; every NPU affine to one node), default options")
    return Table(
        title="ascend_topology.plan: median time vs host size",
        columns=["NPUs", "CPUs", "NUMA", "plan ms (median)", "us per CPU", "vs fewest CPUs"],
        rows=rows,
        notes=notes,
    )


def _policy_table(quick: bool) -> Table:
    npus, cpus, nodes = TARGET_HOST
    budget = 0.02 if quick else 0.3
    rows: list[list[object]] = []
    base = None
    for soc, tpc in (("A2", 1), ("A3", 1), ("A5", 2)):
        facts = make_synthetic_host(npus=npus, cpus=cpus, numa_nodes=nodes, soc=soc,
                                    threads_per_core=tpc)
        result = plan(facts)
        ms = _median_ms(facts, PlanOptions(), budget)
        base = base or ms
        rows.append([soc, result.mode, round(ms, 4), f"{ms / base:.2f}x", result.ok])
    return Table(
        title="ascend_topology.plan: policies side by side (16 NPUs / 640 CPUs / 8 NUMA)",
        columns=["SoC", "mode", "plan ms (median)", "vs A2", "plan ok"],
        rows=rows,
        notes=[f"target < {TARGET_MS:g} ms for each policy"],
    )


def run(quick: bool = False) -> list[Table]:
    """Plan-time tables (``quick``: fewest sizes, a few hundredths of a second each)."""
    return [_growth_table(quick), _policy_table(quick)]

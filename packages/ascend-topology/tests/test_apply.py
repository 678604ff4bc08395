from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from ascend_topology import NpuPlan, Plan, PlanOptions, apply
from ascend_topology.irq import bind_npu_irqs

# The child names one thread acl_thread and one release_thread (as CANN does), then waits.
CHILD = """
import sys, threading
from pathlib import Path
def named(name, ready):
    Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
    ready.set()
    threading.Event().wait(60)
events = []
for name in ("acl_thread", "release_thread"):
    ready = threading.Event()
    threading.Thread(target=named, args=(name, ready), daemon=True).start()
    events.append(ready)
for ready in events:
    ready.wait(10)
print("ready", flush=True)
sys.stdin.read()
"""

CPUS = sorted(os.sched_getaffinity(0))


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def _plan(main: tuple[int, ...], acl: tuple[int, ...], release: tuple[int, ...],
          soc: str = "A2") -> Plan:
    pool = NpuPlan(npu=0, numa_node=0, cpus=tuple(sorted({*main, *acl, *release})), main=main,
                   acl=acl, release=release)
    return Plan(soc=soc, mode="global_slice", npus=(pool,),
                options=PlanOptions(min_cpus_per_npu=1, migrate_memory=False))


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_apply_binds_a_child_process_and_its_named_threads(
    child: subprocess.Popen[str],
) -> None:
    main_cpu, other = CPUS[0], CPUS[1]
    report = apply(_plan((main_cpu,), (other,), (other,)), 0, pid=child.pid)
    assert report.bound and report.npu == 0 and report.skipped == []
    process = psutil.Process(child.pid)
    assert process.cpu_affinity() == [main_cpu]
    names = {int(p.name): (p / "comm").read_text().strip()
             for p in Path(f"/proc/{child.pid}/task").iterdir()}
    for tid, name in names.items():
        expected = [other] if name in ("acl_thread", "release_thread") else [main_cpu]
        assert psutil.Process(tid).cpu_affinity() == expected, name
    assert any("1 acl_thread -> CPUs" in line for line in report.done)


def test_apply_on_950_binds_every_thread_to_the_pool(child: subprocess.Popen[str]) -> None:
    plan = _plan((CPUS[-1],), (), (), soc="A5")
    report = apply(plan, 0, pid=child.pid)
    assert report.bound
    for task in Path(f"/proc/{child.pid}/task").iterdir():
        assert psutil.Process(int(task.name)).cpu_affinity() == [CPUS[-1]]
    assert any("UVB poll threads" in s for s in report.skipped)


def test_apply_refuses_a_plan_with_problems_and_changes_nothing(
    child: subprocess.Popen[str],
) -> None:
    before = psutil.Process(child.pid).cpu_affinity()
    bad = Plan(soc="A3", mode="global_slice", npus=_plan((0,), (0,), (0,)).npus,
               problems=("8 NPUs need at least 40 CPUs (5 per NPU); 32 are allowed",))
    report = apply(bad, 0, pid=child.pid)
    assert not report.bound
    assert report.skipped == ["binding skipped: 8 NPUs need at least 40 CPUs (5 per NPU); "
                              "32 are allowed"]
    assert psutil.Process(child.pid).cpu_affinity() == before


def test_apply_never_raises_on_bad_rank_pid_or_cpus(child: subprocess.Popen[str]) -> None:
    plan = _plan((CPUS[0],), (CPUS[0],), (CPUS[0],))
    assert "rank 3 is out of range" in apply(plan, 3).skipped[0]
    gone = apply(plan, 0, pid=2**22 + 12345)
    assert not gone.bound and "cannot list the threads" in gone.skipped[0]
    before = psutil.Process(child.pid).cpu_affinity()
    impossible = apply(_plan((4000,), (4000,), (4000,)), 0, pid=child.pid)
    assert not impossible.bound and "keeps its current affinity" in impossible.skipped[0]
    assert psutil.Process(child.pid).cpu_affinity() == before


def test_apply_reports_missing_migratepages_and_irq_opt_in(
    child: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    pool = _plan((CPUS[0],), (CPUS[0],), (CPUS[0],)).npus
    plan = Plan(soc="A2", mode="global_slice", npus=pool,
                options=PlanOptions(min_cpus_per_npu=1, bind_irq=True))
    calls = []

    def fake_irq(p: NpuPlan, soc: str, *, stop_irqbalance: bool) -> tuple[list[str], list[str]]:
        calls.append((p.npu, soc, stop_irqbalance))
        return ["IRQ 7 -> CPU 0"], []

    report = apply(plan, 0, pid=child.pid, irq_binder=fake_irq)
    assert "memory migration: migratepages is not installed (numactl)" in report.skipped
    assert calls == [(0, "A2", False)] and "IRQ 7 -> CPU 0" in report.done


def _irq_tree(tmp_path: Path) -> dict[str, Any]:
    irq_root = tmp_path / "irq"
    for irq in (120, 121, 300, 301):
        (irq_root / str(irq)).mkdir(parents=True)
        (irq_root / str(irq) / "smp_affinity").write_text("ffffffff")
    msi = tmp_path / "pci" / "0000:c1:00.0" / "msi_irqs"
    msi.mkdir(parents=True)
    for irq in (300, 301):
        (msi / str(irq)).write_text("msi")
    interrupts = tmp_path / "interrupts"
    interrupts.write_text(" 120: 0 0 ITS-MSI sq_send_trigger_irq\n"
                          " 121: 0 0 ITS-MSI cq_update_irq\n"
                          " 300: 0 0 ITS-MSI sq_send_trigger_irq\n"
                          " 301: 0 0 ITS-MSI cq_update_irq\n")
    return {"irq_root": irq_root, "pci_root": tmp_path / "pci", "interrupts": interrupts}


def test_irq_binding_writes_masks_for_the_devices_sq_and_cq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ascend_topology.irq.irqbalance_active", lambda: False)
    roots = _irq_tree(tmp_path)
    pool = NpuPlan(npu=0, numa_node=0, cpus=tuple(range(35, 40)), main=(37,), acl=(38,),
                   release=(39,), irq=(35, 36))
    done, skipped = bind_npu_irqs(pool, "A2", pcie="0000:c1:00.0", **roots)
    assert skipped == []
    assert (roots["irq_root"] / "300" / "smp_affinity").read_text() == "00000008,00000000"
    assert (roots["irq_root"] / "301" / "smp_affinity").read_text() == "00000010,00000000"
    assert (roots["irq_root"] / "120" / "smp_affinity").read_text() == "ffffffff"
    assert done == ["IRQ 300 of NPU 0 -> CPU 35", "IRQ 301 of NPU 0 -> CPU 36"]


def test_irq_binding_leaves_irqbalance_alone_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ascend_topology.irq.irqbalance_active", lambda: True)
    stopped: list[list[str]] = []

    def fake_run(args: list[str], timeout: float) -> str:
        stopped.append(args)
        return ""

    monkeypatch.setattr("ascend_topology.irq.run_command", fake_run)
    roots = _irq_tree(tmp_path)
    pool = NpuPlan(npu=0, numa_node=0, cpus=(0, 1, 2, 3, 4), main=(2,), irq=(0, 1))
    done, skipped = bind_npu_irqs(pool, "A2", pcie="0000:c1:00.0", **roots)
    assert done == [] and "irqbalance is active" in skipped[0] and stopped == []
    done, skipped = bind_npu_irqs(pool, "A2", stop_irqbalance=True, pcie="0000:c1:00.0",
                                  **roots)
    assert stopped == [["systemctl", "stop", "irqbalance"]]
    assert done[0].startswith("stopped irqbalance") and "IRQ 300 of NPU 0 -> CPU 0" in done


def test_irq_binding_skips_with_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ascend_topology.irq.irqbalance_active", lambda: False)
    roots = _irq_tree(tmp_path)
    pool = NpuPlan(npu=0, numa_node=0, cpus=(0, 1, 2, 3, 4), main=(2,), irq=(0, 1))
    assert "not used on Ascend 950" in bind_npu_irqs(pool, "A5", **roots)[1][0]
    missing = bind_npu_irqs(pool, "A2", pcie="0000:c9:00.0", **roots)[1][0]
    assert "cannot read the IRQs of 0000:c9:00.0" in missing
    (roots["interrupts"]).write_text("nothing here\n")
    assert "no sq_send_trigger_irq IRQ in" in bind_npu_irqs(
        pool, "A2", pcie="0000:c1:00.0", **roots)[1][0]
    no_irq = NpuPlan(npu=0, numa_node=0, cpus=(0,), main=(0,))
    assert "reserves no IRQ CPUs" in bind_npu_irqs(no_irq, "A2", **roots)[1][0]


def test_bind_worker_on_this_machine_reports_why_and_changes_nothing() -> None:
    from ascend_topology import bind_worker

    before = os.sched_getaffinity(0)
    report = bind_worker(0, PlanOptions(min_cpus_per_npu=1))
    assert not report.bound and report.plan is None and report.done == []
    assert report.skipped[0].startswith("binding skipped: npu-smi was not found on PATH")
    assert os.sched_getaffinity(0) == before


def test_stopping_irqbalance_gets_30_seconds(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The README states the timeout; test_apply_paths checks the README text.
    monkeypatch.setattr("ascend_topology.irq.irqbalance_active", lambda: True)
    calls: list[tuple[list[str], float]] = []

    def fake_run(args: list[str], timeout: float = -1.0) -> str:
        calls.append((args, timeout))
        return ""

    monkeypatch.setattr("ascend_topology.irq.run_command", fake_run)
    pool = NpuPlan(npu=0, numa_node=0, cpus=(0, 1, 2, 3, 4), main=(2,), irq=(0, 1))
    bind_npu_irqs(pool, "A2", stop_irqbalance=True, pcie="0000:c1:00.0", **_irq_tree(tmp_path))
    assert calls == [(["systemctl", "stop", "irqbalance"], 30)]

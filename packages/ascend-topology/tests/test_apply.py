from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from ascend_topology import ApplyReport, NpuPlan, Plan, PlanOptions, apply, bind_worker
from ascend_topology.irq import bind_npu_irqs, irqbalance_active

from .conftest import InstallFake
from .stand_in_commands import stand_in_command

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


POOL = NpuPlan(npu=2, numa_node=1, cpus=(4, 5, 6, 7), main=(4, 5), acl=(6,), release=(7,))


PID = 100


NAMED = {PID: {PID: "python", 101: "acl_thread", 102: "release_thread"}}


def _pool_plan(pool: NpuPlan = POOL, soc: str = "A2", **options: object) -> Plan:
    opts = {"min_cpus_per_npu": 1, "migrate_memory": False, **options}
    return Plan(soc=soc, mode="topo_affinity", npus=(pool,), numa_nodes=(0, 1),
                uvb_cpus=(1, 2), options=PlanOptions(**opts))  # type: ignore[arg-type]


def _proc(tmp_path: Path, threads: dict[int, dict[int, str]]) -> Path:
    """A fake /proc: pid -> {tid: thread name}."""
    root = tmp_path / "proc"
    for pid, names in threads.items():
        for tid, name in names.items():
            (root / str(pid) / "task" / str(tid)).mkdir(parents=True)
            (root / str(pid) / "task" / str(tid) / "comm").write_text(name + "\n")
    return root


class Affinity:
    """Records ``os.sched_setaffinity`` calls; tids in ``gone`` have ended, in ``denied`` the
    call fails with EPERM."""

    def __init__(self, gone: set[int] = frozenset(), denied: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls: list[tuple[int, list[int]]] = []
        self.gone, self.denied = gone, denied

    def __call__(self, tid: int, cpus: object) -> None:
        self.calls.append((tid, sorted(cpus)))  # type: ignore[call-overload]
        if tid in self.gone:
            raise ProcessLookupError(errno.ESRCH, "No such process")
        if tid in self.denied:
            raise PermissionError(errno.EPERM, "Operation not permitted")


@pytest.fixture
def affinity(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Affinity]:
    def install(**kwargs: set[int]) -> Affinity:
        fake = Affinity(**kwargs)
        monkeypatch.setattr(os, "sched_setaffinity", fake)
        return fake

    return install


def test_threads_get_their_role_cpus_the_process_first(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity()
    proc = _proc(tmp_path, {PID: {103: "acl_thread", 101: "python", PID: "python",
                                  104: "release_thread", 102: "worker"}})
    report = apply(_pool_plan(), 0, pid=PID, proc_root=proc)
    assert fake.calls[0] == (PID, [4, 5])  # the process's own thread first
    assert sorted(fake.calls) == [(PID, [4, 5]), (101, [4, 5]), (102, [4, 5]), (103, [6]),
                                  (104, [7])]
    assert report.bound and report.npu == 2 and report.pid == PID
    assert report.done == ["process 100: 3 threads -> main CPUs 4-5",
                           "1 acl_thread -> CPUs 6", "1 release_thread -> CPUs 7"]
    assert report.skipped == []
    assert str(report) == "\n".join(report.done)


def test_the_process_is_bound_first_even_when_a_thread_id_is_lower(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity(denied={PID, 7})
    proc = _proc(tmp_path, {PID: {7: "acl_thread", PID: "python"}})
    report = apply(_pool_plan(), 0, pid=PID, proc_root=proc)
    assert fake.calls == [(PID, [4, 5])]  # refused: nothing else is touched
    assert not report.bound and report.done == []
    assert report.skipped == ["process 100: cannot set CPU affinity to 4-5 (Operation not "
                              "permitted); it keeps its current affinity"]
    assert report.lines() == ["skipped: " + report.skipped[0]]


def test_threads_that_end_or_refuse_are_skipped_and_the_rest_bound(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity(gone={101}, denied={102})
    proc = _proc(tmp_path, {PID: {PID: "python", 101: "gone", 102: "stuck", 103: "x",
                                  104: "acl_thread"}})
    report = apply(_pool_plan(), 0, pid=PID, proc_root=proc)
    assert sorted(t for t, _ in fake.calls) == [PID, 101, 102, 103, 104]
    assert report.bound
    assert report.done == ["process 100: 2 threads -> main CPUs 4-5", "1 acl_thread -> CPUs 6"]
    assert report.skipped == ["thread 102 (stuck): Operation not permitted",
                              "no thread named release_thread in process 100 (yet)"]


def test_role_threads_without_role_cpus_share_main(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity()
    pool = NpuPlan(npu=0, numa_node=0, cpus=(3,), main=(3,))
    proc = _proc(tmp_path, {PID: {PID: "python", 101: "acl_thread", 102: "release_thread"}})
    report = apply(_pool_plan(pool), 0, pid=PID, proc_root=proc)
    assert sorted(fake.calls) == [(PID, [3]), (101, [3]), (102, [3])]
    assert report.done == ["process 100: 3 threads -> main CPUs 3"] and report.skipped == []


def test_uvb_threads_of_any_process_get_the_uvb_pool(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity(denied={301})
    pool = NpuPlan(npu=0, numa_node=3, cpus=(8, 9), main=(8, 9))
    proc = _proc(tmp_path, {PID: {PID: "python"},
                            200: {200: "other", 201: "uvb_poll_window_thread"},
                            300: {302: "uvb_poll_window_thread", 301: "uvb_poll_window_thread"}})
    report = apply(_pool_plan(pool, soc="A5"), 0, pid=PID, proc_root=proc)
    assert fake.calls == [(PID, [8, 9]), (201, [1, 2]), (301, [1, 2]), (302, [1, 2])]
    assert report.done == ["process 100: 1 threads -> main CPUs 8-9",
                           "uvb_poll_window_thread 201,302 -> CPUs 1-2"]
    assert report.skipped == [
        "uvb_poll_window_thread 301: Operation not permitted (Docker: --pid=host?)"]


def test_uvb_binding_skips_with_reasons(tmp_path: Path, affinity: Callable[..., Affinity]) -> None:
    fake = affinity()
    pool = NpuPlan(npu=0, numa_node=3, cpus=(8,), main=(8,))
    proc = _proc(tmp_path, {PID: {PID: "python"}})
    report = apply(_pool_plan(pool, soc="A5"), 0, pid=PID, proc_root=proc)
    assert report.skipped == ["no uvb_poll_window_thread thread visible (in Docker, start the "
                              "container with --pid=host)"]
    no_pool = Plan(soc="A5", mode="cluster_pools", npus=(pool,),
                   options=PlanOptions(migrate_memory=False))
    report = apply(no_pool, 0, pid=PID, proc_root=proc)
    assert report.skipped == ["UVB poll threads: no CPU of NUMA node 0 (except CPU 0) allowed"]
    assert fake.calls == [(PID, [8]), (PID, [8])]


def test_uvb_threads_are_left_alone_off_950(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity()
    proc = _proc(tmp_path, {PID: {PID: "python"}, 200: {201: "uvb_poll_window_thread"}})
    apply(_pool_plan(), 0, pid=PID, proc_root=proc)
    assert [t for t, _ in fake.calls] == [PID]


def test_memory_migration_runs_migratepages(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path
) -> None:
    affinity()
    log = stand_in_command(no_commands, "migratepages", "")
    proc = _proc(tmp_path, NAMED)
    report = apply(_pool_plan(migrate_memory=True), 0, pid=PID, proc_root=proc)
    assert log.read_text() == "100 0,1 1\n"  # pid, every node, the pool's node
    assert report.done[-1] == "process 100: memory migrated to NUMA node 1"
    single = Plan(soc="A2", mode="topo_affinity", npus=(POOL,), options=PlanOptions())
    apply(single, 0, pid=PID, proc_root=proc)
    assert log.read_text().splitlines()[-1] == "100 1 1"  # no node list: the pool's node


def test_memory_migration_failure_is_reported(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path
) -> None:
    affinity()
    stand_in_command(no_commands, "migratepages", "raise SystemExit(3)")
    proc = _proc(tmp_path, NAMED)
    report = apply(_pool_plan(migrate_memory=True), 0, pid=PID, proc_root=proc)
    assert report.bound and report.skipped == [
        "memory migration: `migratepages 100 0,1 1` exited with status 3"]


def test_memory_migration_only_when_asked(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path
) -> None:
    affinity()
    log = stand_in_command(no_commands, "migratepages", "")
    proc = _proc(tmp_path, NAMED)
    report = apply(_pool_plan(migrate_memory=False), 0, pid=PID, proc_root=proc)
    assert not log.exists() and report.skipped == []


def test_apply_turns_unexpected_errors_into_a_line(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    affinity()

    def broken(*args: object, **kwargs: object) -> tuple[list[str], list[str]]:
        raise ValueError("boom")

    proc = _proc(tmp_path, NAMED)
    report = apply(_pool_plan(bind_irq=True), 0, pid=PID, proc_root=proc, irq_binder=broken)
    assert report.bound
    assert report.skipped == ["binding skipped after an unexpected error: ValueError('boom')"]
    assert apply(_pool_plan(), 5).pid == os.getpid()  # default pid; rank 5 does not exist


def test_apply_passes_the_irqbalance_opt_in(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    affinity()
    calls: list[tuple[int, str, bool]] = []

    def binder(pool: NpuPlan, soc: str, *, stop_irqbalance: bool) -> tuple[list[str], list[str]]:
        calls.append((pool.npu, soc, stop_irqbalance))
        return ["irq done"], ["irq skipped"]

    proc = _proc(tmp_path, NAMED)
    report = apply(_pool_plan(bind_irq=True), 0, pid=PID, proc_root=proc, irq_binder=binder,
                   stop_irqbalance=True)
    assert calls == [(2, "A2", True)]
    assert report.done == ["process 100: 1 threads -> main CPUs 4-5", "1 acl_thread -> CPUs 6",
                           "1 release_thread -> CPUs 7", "irq done"]
    assert report.skipped == ["irq skipped"]
    apply(_pool_plan(bind_irq=False), 0, pid=PID, proc_root=proc, irq_binder=binder)
    assert len(calls) == 1


def test_bind_worker_reads_plans_and_applies(install_fake_npu_smi: InstallFake) -> None:
    # The 310P example: chips 0 and 1 affine to CPUs 0-31, here the CPUs of this machine.
    install_fake_npu_smi("310p")
    cpus = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        options = PlanOptions(min_cpus_per_npu=1, migrate_memory=False)
        report = bind_worker(0, options, pid=child.pid,
                             environ={"ASCEND_RT_VISIBLE_DEVICES": "1"})
        assert report.plan is not None and [p.npu for p in report.plan.npus] == [1]
        assert report.bound and report.npu == 1 and report.rank == 0
        assert psutil.Process(child.pid).cpu_affinity() == list(report.plan.npus[0].main)
        assert set(report.plan.npus[0].cpus) <= set(cpus)
        forced = bind_worker(0, options, soc="A3", pid=child.pid)
        assert forced.plan is not None and forced.plan.soc == "A3"
        assert forced.plan.mode == "global_slice"
    finally:
        child.kill()
        child.wait()


def test_bind_worker_turns_unexpected_errors_into_a_line(
    install_fake_npu_smi: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_npu_smi("310p")

    def broken(*args: object) -> Plan:
        raise ValueError("boom")

    # "ascend_topology.apply" names the function; patch the module it comes from.
    monkeypatch.setattr(sys.modules["ascend_topology.apply"], "make_plan", broken)
    report = bind_worker(3)
    assert (report.rank, report.pid, report.bound, report.plan) == (3, os.getpid(), False, None)
    assert report.skipped == ["binding skipped after an unexpected error: ValueError('boom')"]
    assert bind_worker(3, pid=42).pid == 42


def test_bind_worker_without_npu_smi(no_commands: Path) -> None:
    report = bind_worker(1, pid=42)
    assert (report.rank, report.pid, report.bound) == (1, 42, False)
    assert bind_worker(1).pid == os.getpid()
    assert report.skipped[0].startswith("binding skipped: npu-smi was not found on PATH")
    assert ApplyReport(rank=0, pid=1).lines() == []


def test_migratepages_and_systemctl_get_the_timeouts_the_readme_states(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import shutil

    from ascend_topology import irq

    apply_module = importlib.import_module("ascend_topology.apply")

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    flat = " ".join(readme.split())
    assert ("10 s for `lspci` and `systemctl is-active irqbalance`, 30 s for `systemctl stop "
            "irqbalance`, 120 s for `migratepages`") in flat
    calls: list[tuple[list[str], float]] = []

    def fake_run(args: list[str], timeout: float = -1.0) -> str:
        calls.append((list(args), timeout))
        return ""

    affinity()
    stand_in_command(no_commands, "migratepages", "")
    monkeypatch.setattr(apply_module, "run_command", fake_run)
    apply(_pool_plan(migrate_memory=True), 0, pid=PID, proc_root=_proc(tmp_path, NAMED))
    assert calls == [(["migratepages", "100", "0,1", "1"], 120)]
    monkeypatch.setattr(irq, "run_command", fake_run)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert irqbalance_active()
    assert calls[-1] == (["systemctl", "is-active", "--quiet", "irqbalance"], 10)

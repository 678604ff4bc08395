"""Every path of ``apply``/``bind_worker`` and the IRQ helpers, with the OS seams faked:
a /proc tree in tmp_path, a recording ``os.sched_setaffinity``, stand-in commands on PATH."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from ascend_topology import ApplyReport, NpuPlan, Plan, PlanOptions, apply, bind_worker
from ascend_topology.irq import bind_npu_irqs, irqbalance_active

from .conftest import InstallFake

POOL = NpuPlan(npu=2, numa_node=1, cpus=(4, 5, 6, 7), main=(4, 5), acl=(6,), release=(7,))
PID = 100
NAMED = {PID: {PID: "python", 101: "acl_thread", 102: "release_thread"}}


def _plan(pool: NpuPlan = POOL, soc: str = "A2", **options: object) -> Plan:
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


@pytest.fixture
def no_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """PATH holds only an empty folder (add stand-in commands to it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def _command(bin_dir: Path, name: str, body: str) -> Path:
    """A stand-in command that logs its arguments to ``<name>.log`` and runs ``body``."""
    log = bin_dir / f"{name}.log"
    script = bin_dir / name
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n{body}\n")
    script.chmod(0o755)
    return log


# --- threads -------------------------------------------------------------------------------

def test_threads_get_their_role_cpus_the_process_first(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity()
    proc = _proc(tmp_path, {PID: {103: "acl_thread", 101: "python", PID: "python",
                                  104: "release_thread", 102: "worker"}})
    report = apply(_plan(), 0, pid=PID, proc_root=proc)
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
    report = apply(_plan(), 0, pid=PID, proc_root=proc)
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
    report = apply(_plan(), 0, pid=PID, proc_root=proc)
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
    report = apply(_plan(pool), 0, pid=PID, proc_root=proc)
    assert sorted(fake.calls) == [(PID, [3]), (101, [3]), (102, [3])]
    assert report.done == ["process 100: 3 threads -> main CPUs 3"] and report.skipped == []


# --- UVB poll threads on Ascend 950 ---------------------------------------------------------

def test_uvb_threads_of_any_process_get_the_uvb_pool(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    fake = affinity(denied={301})
    pool = NpuPlan(npu=0, numa_node=3, cpus=(8, 9), main=(8, 9))
    proc = _proc(tmp_path, {PID: {PID: "python"},
                            200: {200: "other", 201: "uvb_poll_window_thread"},
                            300: {302: "uvb_poll_window_thread", 301: "uvb_poll_window_thread"}})
    report = apply(_plan(pool, soc="A5"), 0, pid=PID, proc_root=proc)
    assert fake.calls == [(PID, [8, 9]), (201, [1, 2]), (301, [1, 2]), (302, [1, 2])]
    assert report.done == ["process 100: 1 threads -> main CPUs 8-9",
                           "uvb_poll_window_thread 201,302 -> CPUs 1-2"]
    assert report.skipped == [
        "uvb_poll_window_thread 301: Operation not permitted (Docker: --pid=host?)"]


def test_uvb_binding_skips_with_reasons(tmp_path: Path, affinity: Callable[..., Affinity]) -> None:
    fake = affinity()
    pool = NpuPlan(npu=0, numa_node=3, cpus=(8,), main=(8,))
    proc = _proc(tmp_path, {PID: {PID: "python"}})
    report = apply(_plan(pool, soc="A5"), 0, pid=PID, proc_root=proc)
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
    apply(_plan(), 0, pid=PID, proc_root=proc)
    assert [t for t, _ in fake.calls] == [PID]


# --- memory migration ----------------------------------------------------------------------

def test_memory_migration_runs_migratepages(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path
) -> None:
    affinity()
    log = _command(no_commands, "migratepages", "")
    proc = _proc(tmp_path, NAMED)
    report = apply(_plan(migrate_memory=True), 0, pid=PID, proc_root=proc)
    assert log.read_text() == "100 0,1 1\n"  # pid, every node, the pool's node
    assert report.done[-1] == "process 100: memory migrated to NUMA node 1"
    single = Plan(soc="A2", mode="topo_affinity", npus=(POOL,), options=PlanOptions())
    apply(single, 0, pid=PID, proc_root=proc)
    assert log.read_text().splitlines()[-1] == "100 1 1"  # no node list: the pool's node


def test_memory_migration_failure_is_reported(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path
) -> None:
    affinity()
    _command(no_commands, "migratepages", "raise SystemExit(3)")
    proc = _proc(tmp_path, NAMED)
    report = apply(_plan(migrate_memory=True), 0, pid=PID, proc_root=proc)
    assert report.bound and report.skipped == [
        "memory migration: `migratepages 100 0,1 1` exited with status 3"]


def test_memory_migration_only_when_asked(
    tmp_path: Path, affinity: Callable[..., Affinity], no_commands: Path
) -> None:
    affinity()
    log = _command(no_commands, "migratepages", "")
    proc = _proc(tmp_path, NAMED)
    report = apply(_plan(migrate_memory=False), 0, pid=PID, proc_root=proc)
    assert not log.exists() and report.skipped == []


# --- apply and bind_worker never raise -----------------------------------------------------

def test_apply_turns_unexpected_errors_into_a_line(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    affinity()

    def broken(*args: object, **kwargs: object) -> tuple[list[str], list[str]]:
        raise ValueError("boom")

    proc = _proc(tmp_path, NAMED)
    report = apply(_plan(bind_irq=True), 0, pid=PID, proc_root=proc, irq_binder=broken)
    assert report.bound
    assert report.skipped == ["binding skipped after an unexpected error: ValueError('boom')"]
    assert apply(_plan(), 5).pid == os.getpid()  # default pid; rank 5 does not exist


def test_apply_passes_the_irqbalance_opt_in(
    tmp_path: Path, affinity: Callable[..., Affinity]
) -> None:
    affinity()
    calls: list[tuple[int, str, bool]] = []

    def binder(pool: NpuPlan, soc: str, *, stop_irqbalance: bool) -> tuple[list[str], list[str]]:
        calls.append((pool.npu, soc, stop_irqbalance))
        return ["irq done"], ["irq skipped"]

    proc = _proc(tmp_path, NAMED)
    report = apply(_plan(bind_irq=True), 0, pid=PID, proc_root=proc, irq_binder=binder,
                   stop_irqbalance=True)
    assert calls == [(2, "A2", True)]
    assert report.done == ["process 100: 1 threads -> main CPUs 4-5", "1 acl_thread -> CPUs 6",
                           "1 release_thread -> CPUs 7", "irq done"]
    assert report.skipped == ["irq skipped"]
    apply(_plan(bind_irq=False), 0, pid=PID, proc_root=proc, irq_binder=binder)
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


# --- irqbalance ----------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "active"), [(0, True), (3, False)])
def test_irqbalance_active_asks_systemctl(no_commands: Path, status: int, active: bool) -> None:
    log = _command(no_commands, "systemctl", f"raise SystemExit({status})")
    assert irqbalance_active() is active
    assert log.read_text() == "is-active --quiet irqbalance\n"


def test_irqbalance_is_inactive_without_systemctl(no_commands: Path) -> None:
    assert irqbalance_active() is False


def test_irqbalance_stop_and_its_failure(
    tmp_path: Path, no_commands: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .test_irq import POOL as IRQ_POOL
    from .test_irq import _host

    roots = _host(tmp_path, {300: "sq_send_trigger_irq", 301: "cq_update_irq"}, {300, 301})
    log = _command(no_commands, "systemctl", "raise SystemExit(0)")
    done, skipped = bind_npu_irqs(IRQ_POOL, "A2", pcie="0000:c1:00.0", **roots)
    assert done == [] and skipped == [
        "IRQ binding: irqbalance is active and would move the IRQs back; not bound (opt in to "
        "stopping it with --stop-irqbalance)"]
    done, skipped = bind_npu_irqs(IRQ_POOL, "A2", stop_irqbalance=True, pcie="0000:c1:00.0",
                                  **roots)
    assert log.read_text().splitlines()[-1] == "stop irqbalance"
    assert done == ["stopped irqbalance (requested) so that it keeps the IRQ binding",
                    "IRQ 300 of NPU 0 -> CPU 35", "IRQ 301 of NPU 0 -> CPU 36"]
    _command(no_commands, "systemctl",
             "raise SystemExit(0 if sys.argv[1] == 'is-active' else 5)")
    done, skipped = bind_npu_irqs(IRQ_POOL, "A2", stop_irqbalance=True, pcie="0000:c1:00.0",
                                  **roots)
    assert done == [] and skipped == [
        "IRQ binding: could not stop irqbalance: `systemctl stop irqbalance` exited with "
        "status 5"]


# --- command timeouts (stated in the README) -----------------------------------------------

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
    _command(no_commands, "migratepages", "")
    monkeypatch.setattr(apply_module, "run_command", fake_run)
    apply(_plan(migrate_memory=True), 0, pid=PID, proc_root=_proc(tmp_path, NAMED))
    assert calls == [(["migratepages", "100", "0,1", "1"], 120)]
    monkeypatch.setattr(irq, "run_command", fake_run)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert irqbalance_active()
    assert calls[-1] == (["systemctl", "is-active", "--quiet", "irqbalance"], 10)

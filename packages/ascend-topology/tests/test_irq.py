"""IRQ binding writes only IRQs that /proc/interrupts names as NPU queue interrupts *and*
that belong to the NPU's PCI device (so no other device's interrupts are moved)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ascend_topology import NpuPlan
from ascend_topology.irq import bind_npu_irqs, irqbalance_active

from .conftest import InstallFake
from .stand_in_commands import stand_in_command

POOL = NpuPlan(npu=0, numa_node=0, cpus=(35, 36, 37, 38, 39), main=(37,), acl=(38,),
               release=(39,), irq=(35, 36))
ADDRESS = "0000:c1:00.0"
UNTOUCHED = "ffffffff"
SQ, CQ = "sq_send_trigger_irq", "cq_update_irq"


def _host(tmp_path: Path, names: dict[int, str], device_irqs: set[int]) -> dict[str, Any]:
    """A fake /proc/irq, /proc/interrupts and the device's msi_irqs folder."""
    irq_root = tmp_path / "irq"
    for irq in {*names, *device_irqs}:
        (irq_root / str(irq)).mkdir(parents=True)
        (irq_root / str(irq) / "smp_affinity").write_text(UNTOUCHED)
    msi = tmp_path / "pci" / ADDRESS / "msi_irqs"
    msi.mkdir(parents=True)
    for irq in device_irqs:
        (msi / str(irq)).write_text("msi")
    lines = [f" {irq}: 0 0 ITS-MSI {irq} Edge {name}" for irq, name in sorted(names.items())]
    (tmp_path / "interrupts").write_text("           CPU0 CPU1\n" + "\n".join(lines) + "\n")
    return {"irq_root": irq_root, "pci_root": tmp_path / "pci",
            "interrupts": tmp_path / "interrupts"}


def _masks(roots: dict[str, Any]) -> dict[int, str]:
    irq_root: Path = roots["irq_root"]
    return {int(p.name): (p / "smp_affinity").read_text() for p in irq_root.iterdir()}


@pytest.fixture(autouse=True)
def _no_irqbalance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ascend_topology.irq.irqbalance_active", lambda: False)


def test_sq_plus_one_that_is_not_a_cq_irq_is_left_alone(tmp_path: Path) -> None:
    # 301 belongs to the device but /proc/interrupts names it as something else.
    roots = _host(tmp_path, {300: SQ, 301: "eth0-tx-3"}, {300, 301})
    done, skipped = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert done == ["IRQ 300 of NPU 0 -> CPU 35"]
    assert skipped == [f"IRQ binding: no {CQ} IRQ in {roots['interrupts']} belongs to "
                       f"{ADDRESS}; only IRQ 300 ({SQ}) was bound"]
    # CPU 35 = bit 3 of the second 32-CPU group.
    assert _masks(roots) == {300: "00000008,00000000", 301: UNTOUCHED}


def test_a_cq_irq_of_another_device_is_left_alone(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300})
    done, skipped = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert done == ["IRQ 300 of NPU 0 -> CPU 35"] and len(skipped) == 1
    assert _masks(roots)[301] == UNTOUCHED


def test_the_devices_cq_irq_is_found_when_it_is_not_sq_plus_one(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: "other", 305: CQ}, {300, 301, 305})
    done, skipped = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert skipped == []
    assert done == ["IRQ 300 of NPU 0 -> CPU 35", "IRQ 305 of NPU 0 -> CPU 36"]
    assert _masks(roots) == {300: "00000008,00000000", 301: UNTOUCHED,
                             305: "00000010,00000000"}


def test_an_sq_irq_of_another_device_is_never_bound(tmp_path: Path) -> None:
    roots = _host(tmp_path, {120: SQ, 121: CQ, 300: "other"}, {300})
    done, skipped = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert done == []
    assert skipped == [f"IRQ binding: no {SQ} IRQ in {roots['interrupts']} belongs to {ADDRESS}"]
    assert set(_masks(roots).values()) == {UNTOUCHED}


@pytest.mark.parametrize(
    ("names", "device", "expected"),
    [
        ({300: SQ, 301: CQ}, {300, 301}, (300, 301)),  # the driver's usual layout
        ({250: CQ, 300: SQ, 301: CQ}, {250, 300, 301}, (300, 301)),  # sq + 1 preferred
        ({250: CQ, 300: SQ}, {250, 300}, (300, 250)),  # else the device's lowest cq
        ({300: SQ, 200: SQ, 201: CQ}, {200, 201, 300}, (200, 201)),  # lowest sq first
        ({300: SQ}, {300}, (300, None)),
        ({300: SQ, 301: CQ}, {301}, (None, None)),
        ({}, {300, 301}, (None, None)),
    ],
)
def test_npu_queue_irqs(
    names: dict[int, str], device: set[int], expected: tuple[int | None, int | None]
) -> None:
    from ascend_topology.irq import npu_queue_irqs  # here, so the file imports on old trees

    assert npu_queue_irqs(names, device) == expected


@pytest.mark.timeout(30)
def test_unsafe_inputs_are_skipped_with_a_reason(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    _, skipped = bind_npu_irqs(POOL, "A2", pcie="../../../etc", **roots)
    assert skipped == ["IRQ binding: '../../../etc' is not a PCI address like 0000:c1:00.0"]
    interrupts: Path = roots["interrupts"]
    interrupts.unlink()
    os.mkfifo(interrupts)
    _, skipped = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert skipped == [f"IRQ binding: {interrupts} is a FIFO, not a regular file; refused"]
    assert set(_masks(roots).values()) == {UNTOUCHED}


def test_an_smp_affinity_symlink_is_not_followed(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = roots["irq_root"] / "300" / "smp_affinity"
    target.unlink()
    target.symlink_to(victim)
    done, skipped = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert done == [] and skipped[0].startswith("IRQ binding: writing IRQ 300 failed: ")
    assert victim.read_text() == "precious"


def test_skip_reasons_word_for_word(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    assert bind_npu_irqs(POOL, "A5", **roots) == ([], ["IRQ binding: not used on Ascend 950"])
    missing = {**roots, "irq_root": tmp_path / "no-irq"}
    assert bind_npu_irqs(POOL, "A2", **missing) == ([], [
        f"IRQ binding: {tmp_path}/no-irq is not writable (run as root; in Docker use "
        "--privileged=true)"])
    no_irq = NpuPlan(npu=0, numa_node=0, cpus=(1, 2), main=(1,), acl=(2,), release=(2,))
    assert bind_npu_irqs(no_irq, "A2", **roots) == ([], [
        "IRQ binding: the plan reserves no IRQ CPUs"])


@pytest.mark.parametrize(("soc", "npu", "function"), [("A2", 0, "0"), ("A3", 2, "0"),
                                                      ("A3", 3, "1")])
def test_address_from_npu_smi_board_info(
    tmp_path: Path, install_fake_npu_smi: InstallFake, soc: str, npu: int, function: str
) -> None:
    # The stand-in npu-smi answers "0000:C1:00.<last argument>": "-i <npu>" on A2, and
    # "-i <card> -c <chip>" (card = npu // 2, chip = npu % 2) on A3.
    install_fake_npu_smi("a2-8npu")
    address = f"0000:c1:00.{function}"
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    (tmp_path / "pci" / ADDRESS).rename(tmp_path / "pci" / "moved")
    (tmp_path / "pci" / "moved").rename(tmp_path / "pci" / address)
    pool = NpuPlan(npu=npu, numa_node=0, cpus=(35, 36, 37), main=(37,), irq=(35, 36))
    done, skipped = bind_npu_irqs(pool, soc, **roots)
    assert skipped == []
    assert done == [f"IRQ 300 of NPU {npu} -> CPU 35", f"IRQ 301 of NPU {npu} -> CPU 36"]


def test_msi_entries_that_are_not_irq_numbers_are_ignored(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    msi = tmp_path / "pci" / ADDRESS / "msi_irqs"
    for name in ("abc", "\u0663\u0660\u0661", "x1"):
        (msi / name).write_text("msi")
    done, _ = bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots)
    assert done == ["IRQ 300 of NPU 0 -> CPU 35", "IRQ 301 of NPU 0 -> CPU 36"]


def test_one_irq_cpu_serves_both_queues(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    pool = NpuPlan(npu=0, numa_node=0, cpus=(35,), main=(35,), irq=(35,))
    done, _ = bind_npu_irqs(pool, "A2", pcie=ADDRESS, **roots)
    assert done == ["IRQ 300 of NPU 0 -> CPU 35", "IRQ 301 of NPU 0 -> CPU 35"]


def test_write_failures_are_reported(tmp_path: Path) -> None:
    roots = _host(tmp_path, {300: SQ, 301: CQ}, {300, 301})
    too_big = NpuPlan(npu=0, numa_node=0, cpus=(9000,), main=(9000,), irq=(9000,))
    assert bind_npu_irqs(too_big, "A2", pcie=ADDRESS, **roots) == ([], [
        "IRQ binding: writing IRQ 300 failed: CPU id 9000 is outside 0..8191"])
    (roots["irq_root"] / "301" / "smp_affinity").unlink()
    assert bind_npu_irqs(POOL, "A2", pcie=ADDRESS, **roots) == (
        ["IRQ 300 of NPU 0 -> CPU 35"],
        ["IRQ binding: writing IRQ 301 failed: No such file or directory"])


@pytest.mark.parametrize(("status", "active"), [(0, True), (3, False)])
def test_irqbalance_active_asks_systemctl(no_commands: Path, status: int, active: bool) -> None:
    log = stand_in_command(no_commands, "systemctl", f"raise SystemExit({status})")
    assert irqbalance_active() is active
    assert log.read_text() == "is-active --quiet irqbalance\n"


def test_irqbalance_is_inactive_without_systemctl(no_commands: Path) -> None:
    assert irqbalance_active() is False


def test_irqbalance_stop_and_its_failure(
    tmp_path: Path, no_commands: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This test needs the real irqbalance check (this module's autouse fixture replaces it).
    monkeypatch.setattr("ascend_topology.irq.irqbalance_active", irqbalance_active)
    roots = _host(tmp_path, {300: "sq_send_trigger_irq", 301: "cq_update_irq"}, {300, 301})
    log = stand_in_command(no_commands, "systemctl", "raise SystemExit(0)")
    done, skipped = bind_npu_irqs(POOL, "A2", pcie="0000:c1:00.0", **roots)
    assert done == [] and skipped == [
        "IRQ binding: irqbalance is active and would move the IRQs back; not bound (opt in to "
        "stopping it with --stop-irqbalance)"]
    done, skipped = bind_npu_irqs(POOL, "A2", stop_irqbalance=True, pcie="0000:c1:00.0",
                                  **roots)
    assert log.read_text().splitlines()[-1] == "stop irqbalance"
    assert done == ["stopped irqbalance (requested) so that it keeps the IRQ binding",
                    "IRQ 300 of NPU 0 -> CPU 35", "IRQ 301 of NPU 0 -> CPU 36"]
    stand_in_command(no_commands, "systemctl",
             "raise SystemExit(0 if sys.argv[1] == 'is-active' else 5)")
    done, skipped = bind_npu_irqs(POOL, "A2", stop_irqbalance=True, pcie="0000:c1:00.0",
                                  **roots)
    assert done == [] and skipped == [
        "IRQ binding: could not stop irqbalance: `systemctl stop irqbalance` exited with "
        "status 5"]

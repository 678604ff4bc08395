"""Opt-in IRQ binding: the NPU's send/complete queue IRQs go to the pool's first two CPUs.

Only runs when asked (``PlanOptions.bind_irq``); stopping irqbalance needs a second,
separate opt-in because it changes a system service.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ascend_topology.cpulist import cpu_to_mask
from ascend_topology.errors import TopologyError
from ascend_topology.live import read_board_pcie
from ascend_topology.npu_smi import parse_sq_irqs
from ascend_topology.plan_types import NpuPlan
from ascend_topology.system import run_command


def irqbalance_active() -> bool:
    """True when systemd reports irqbalance as active (False without systemctl)."""
    if shutil.which("systemctl") is None:
        return False
    try:
        run_command(["systemctl", "is-active", "--quiet", "irqbalance"], timeout=10)
    except TopologyError:
        return False
    return True


def bind_npu_irqs(
    pool: NpuPlan,
    soc: str,
    *,
    stop_irqbalance: bool = False,
    pcie: str | None = None,
    irq_root: Path = Path("/proc/irq"),
    pci_root: Path = Path("/sys/bus/pci/devices"),
    interrupts: Path = Path("/proc/interrupts"),
) -> tuple[list[str], list[str]]:
    """Bind the NPU's sq/cq IRQs; returns (done, skipped) lines and never raises."""
    done: list[str] = []
    if soc == "A5":
        return done, ["IRQ binding: not used on Ascend 950"]
    if not os.access(irq_root, os.W_OK):
        return done, [f"IRQ binding: {irq_root} is not writable (run as root; in Docker use "
                      "--privileged=true)"]
    if not pool.irq:
        return done, ["IRQ binding: the plan reserves no IRQ CPUs"]
    if irqbalance_active():
        if not stop_irqbalance:
            return done, ["IRQ binding: irqbalance is active and would move the IRQs back; "
                          "not bound (opt in to stopping it with --stop-irqbalance)"]
        try:
            run_command(["systemctl", "stop", "irqbalance"], timeout=30)
            done.append("stopped irqbalance (requested) so that it keeps the IRQ binding")
        except TopologyError as exc:
            return done, [f"IRQ binding: could not stop irqbalance: {exc}"]
    address = pcie or read_board_pcie(pool.npu, soc)
    if not address:
        return done, [f"IRQ binding: no PCIe address for NPU {pool.npu} from npu-smi board info"]
    try:
        msi = {int(p.name) for p in (pci_root / address / "msi_irqs").iterdir()
               if p.name.isascii() and p.name.isdigit()}
        sq_irqs = parse_sq_irqs(interrupts.read_text(errors="replace"))
    except OSError as exc:
        return done, [f"IRQ binding: cannot read the IRQs of {address}: {exc.strerror}"]
    sq = next((irq for irq in sq_irqs if irq in msi), None)
    if sq is None:
        return done, [f"IRQ binding: no sq_send_trigger_irq IRQ belongs to {address}"]
    sq_cpu, cq_cpu = pool.irq[0], pool.irq[-1]
    for irq, cpu in ((sq, sq_cpu), (sq + 1, cq_cpu)):
        try:
            (irq_root / str(irq) / "smp_affinity").write_text(cpu_to_mask(cpu))
        except OSError as exc:
            return done, [f"IRQ binding: writing IRQ {irq} failed: {exc.strerror}"]
        done.append(f"IRQ {irq} of NPU {pool.npu} -> CPU {cpu}")
    return done, []

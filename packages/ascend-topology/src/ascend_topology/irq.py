"""Opt-in IRQ binding: the NPU's send/complete queue IRQs go to the pool's first two CPUs.

Only runs when asked (``PlanOptions.bind_irq``); stopping irqbalance needs a second,
separate opt-in because it changes a system service. Only IRQs that ``/proc/interrupts``
names as the NPU queue interrupts *and* that belong to the NPU's PCI device are written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ascend_topology.cpulist import cpu_to_mask
from ascend_topology.errors import TopologyError
from ascend_topology.live import read_board_pcie
from ascend_topology.npu_smi import CQ_IRQ, SQ_IRQ, is_pci_address, parse_npu_irqs
from ascend_topology.plan_types import NpuPlan
from ascend_topology.safe_io import INTERRUPTS_LIMIT, read_limited, write_proc_value
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
    """Bind the NPU's sq/cq IRQs (see ``npu_queue_irqs``); returns (done, skipped) lines and
    never raises."""
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
    if not is_pci_address(address):
        return done, [f"IRQ binding: {address!r} is not a PCI address like 0000:c1:00.0"]
    try:
        msi = {int(p.name) for p in (pci_root / address / "msi_irqs").iterdir()
               if p.name.isascii() and p.name.isdigit()}
        named = parse_npu_irqs(read_limited(interrupts, INTERRUPTS_LIMIT))
    except OSError as exc:
        return done, [f"IRQ binding: cannot read the IRQs of {address}: {exc.strerror}"]
    except TopologyError as exc:
        return done, [f"IRQ binding: {exc}"]
    sq, cq = npu_queue_irqs(named, msi)
    if sq is None:
        return done, [f"IRQ binding: no {SQ_IRQ} IRQ in {interrupts} belongs to {address}"]
    skipped: list[str] = []
    pairs = [(sq, pool.irq[0])]
    if cq is None:
        skipped.append(f"IRQ binding: no {CQ_IRQ} IRQ in {interrupts} belongs to {address}; "
                       f"only IRQ {sq} ({SQ_IRQ}) was bound")
    else:
        pairs.append((cq, pool.irq[-1]))
    for irq, cpu in pairs:
        try:
            write_proc_value(irq_root / str(irq) / "smp_affinity", cpu_to_mask(cpu))
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            return done, [f"IRQ binding: writing IRQ {irq} failed: {reason}"]
        done.append(f"IRQ {irq} of NPU {pool.npu} -> CPU {cpu}")
    return done, skipped


def npu_queue_irqs(named: dict[int, str], device_irqs: set[int]) -> tuple[int | None, int | None]:
    """(sq, cq) IRQs of one device: the lowest ``sq_send_trigger_irq`` among the device's MSI
    IRQs, and ``sq + 1`` when that is the device's ``cq_update_irq`` (the driver's usual
    layout), else its lowest ``cq_update_irq``. Only IRQs that ``/proc/interrupts`` names
    (``named``) *and* the device owns are ever returned."""
    sqs = sorted(irq for irq, name in named.items() if name == SQ_IRQ and irq in device_irqs)
    cqs = sorted(irq for irq, name in named.items() if name == CQ_IRQ and irq in device_irqs)
    if not sqs:
        return None, None
    sq = sqs[0]
    cq = sq + 1 if sq + 1 in cqs else (cqs[0] if cqs else None)
    return sq, cq

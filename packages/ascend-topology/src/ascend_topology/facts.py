"""``HostFacts``: everything the planner needs to know about one host, and how to build it
from raw npu-smi outputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascend_topology.cpulist import check_cpu_id, format_cpu_list
from ascend_topology.errors import ParseError, TopologyError
from ascend_topology.npu_smi import (
    MAX_NPUS,
    ChipMap,
    check_info_text,
    detect_soc,
    logic_npus,
    parse_chip_map,
    parse_running_npus,
    parse_topo_affinity,
)

SOCS = ("A2", "A3", "A5", "310P")
"""SoC strings this package plans for (same spelling in every package of the repo)."""


@dataclass(frozen=True)
class HostFacts:
    """One host as seen by a process: NPUs, their CPU affinity, NUMA layout, allowed CPUs.

    NPU ids are logical ids (what ``ASCEND_RT_VISIBLE_DEVICES`` and ranks refer to).
    ``running_npus`` is unfiltered; the planner applies ``visible_devices``. Every CPU id is
    checked against ``MAX_CPU_ID`` and NUMA nodes must not share a CPU (``TopologyError``
    otherwise). ``rc_device`` is the 310P
    root-complex mode and ``rc_source`` where that answer came from (see ``is_rc_device``).
    """

    soc: str
    numa: Mapping[int, tuple[int, ...]]
    allowed_cpus: tuple[int, ...]
    chip_map: ChipMap = field(default_factory=dict)
    running_npus: tuple[int, ...] = ()
    affinity: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    threads_per_core: int = 1
    visible_devices: tuple[int, ...] | None = None
    arch: str = "unknown"
    pcie: Mapping[int, str] = field(default_factory=dict)
    source: str = "live"
    rc_device: bool = False
    rc_source: str = "not read"

    def __post_init__(self) -> None:
        if self.soc not in SOCS:
            raise TopologyError(f"unknown SoC {self.soc!r}; allowed: {', '.join(SOCS)}")
        if self.threads_per_core < 1:
            raise TopologyError(f"threads_per_core must be >= 1, got {self.threads_per_core}")
        if not self.numa:
            raise TopologyError("the host has no NUMA layout (no node has CPUs)")
        groups = [("allowed CPUs", self.allowed_cpus)]
        groups += [(f"NUMA node {n}", c) for n, c in self.numa.items()]
        groups += [(f"NPU {n} affinity", c) for n, c in self.affinity.items()]
        for what, cpus in groups:
            for cpu in cpus:
                check_cpu_id(cpu, f"{what}: CPU")
        _check_numa(self.numa)

    @property
    def logic_npus(self) -> tuple[int, ...]:
        """All logical NPUs: from the chip map, else the topology rows, else the running ones."""
        if self.chip_map:
            return tuple(logic_npus(self.chip_map))
        if self.affinity:
            return tuple(sorted(self.affinity))
        return tuple(sorted(set(self.running_npus)))

    def node_of(self) -> dict[int, int]:
        """CPU -> NUMA node."""
        return {cpu: node for node, cpus in self.numa.items() for cpu in cpus}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (CPU sets as ``0-3,8`` strings)."""
        return {
            "source": self.source,
            "soc": self.soc,
            "arch": self.arch,
            "npus": list(self.logic_npus),
            "running_npus": list(self.running_npus),
            "visible_devices": None if self.visible_devices is None else list(self.visible_devices),
            "allowed_cpus": format_cpu_list(self.allowed_cpus),
            "threads_per_core": self.threads_per_core,
            "numa": {str(n): format_cpu_list(c) for n, c in sorted(self.numa.items())},
            "affinity": {str(n): format_cpu_list(c) for n, c in sorted(self.affinity.items())},
            "pcie": {str(n): a for n, a in sorted(self.pcie.items())},
            "rc_device": self.rc_device,
            "rc_source": self.rc_source,
        }

    def describe(self) -> str:
        """A readable multi-line description (what ``ascend-topology show`` prints)."""
        data = self.to_dict()
        lines = [f"host: {data['source']}", f"soc: {self.soc}   arch: {self.arch}"]
        lines.append(f"NPUs (logical): {format_cpu_list(self.logic_npus) or '-'}")
        lines.append(f"running NPUs: {format_cpu_list(self.running_npus) or '-'}")
        visible = "all" if self.visible_devices is None else format_cpu_list(self.visible_devices)
        lines.append(f"visible devices: {visible}")
        lines.append(f"allowed CPUs: {data['allowed_cpus']}   threads per core: "
                     f"{self.threads_per_core}")
        if self.soc == "310P":
            mode = "RC (root complex)" if self.rc_device else "EP (PCIe card)"
            lines.append(f"310P mode: {mode} ({self.rc_source})")
        for node, cpus in data["numa"].items():
            lines.append(f"NUMA node {node}: CPUs {cpus}")
        for npu, cpus in data["affinity"].items():
            lines.append(f"NPU {npu} CPU affinity: {cpus}")
        return "\n".join(lines)


def overlapping_node(node_of: Mapping[int, int], node: int, cpus: Iterable[int]) -> str | None:
    """The problem line when a CPU of ``node`` is already in another node of ``node_of``
    (CPU -> node), else None."""
    for cpu in cpus:
        other = node_of.get(cpu, node)
        if other != node:
            return f"CPU {cpu} is in NUMA node {other} and in NUMA node {node}"
    return None


def _check_numa(numa: Mapping[int, Sequence[int]]) -> None:
    """NUMA nodes must not share a CPU (``TopologyError`` naming the CPU and both nodes)."""
    node_of: dict[int, int] = {}
    for node, cpus in numa.items():
        problem = overlapping_node(node_of, node, cpus)
        if problem:
            raise TopologyError(f"contradictory NUMA layout: {problem}")
        node_of.update(dict.fromkeys(cpus, node))


def parse_visible_devices(text: str | None) -> tuple[int, ...] | None:
    """``ASCEND_RT_VISIBLE_DEVICES`` syntax (``"0,1,3"``) to ids; None/empty means unset."""
    if text is None or not text.strip():
        return None
    ids: list[int] = []
    for count, part in enumerate(text.split(","), 1):
        if count > MAX_NPUS:
            raise ParseError(f"visible devices {text!r:.60}: more than {MAX_NPUS} ids")
        part = part.strip()
        if not (part.isdigit() and part.isascii() and len(part) <= 6):
            raise ParseError(
                f"visible devices {text!r:.60}: {part!r:.20} is not a device id; "
                "expected comma-separated integers like '0,1'"
            )
        if int(part) in ids:
            # "0,0" names one device twice: which rank was meant to get what is unclear.
            raise ParseError(f"visible devices {text!r:.60}: device {int(part)} is listed "
                             "twice; list each device once")
        ids.append(int(part))
    return tuple(ids)


def build_host_facts(
    *,
    chip_map_text: str,
    info_text: str | None,
    topo_text: str,
    numa: Mapping[int, list[int]] | Mapping[int, tuple[int, ...]],
    allowed_cpus: list[int] | tuple[int, ...],
    threads_per_core: int = 1,
    visible_devices: tuple[int, ...] | None = None,
    soc: str | None = None,
    arch: str = "unknown",
    pcie: Mapping[int, str] | None = None,
    source: str = "live",
) -> HostFacts:
    """Parse the three npu-smi outputs and combine them with the OS facts (``info_text`` None:
    ``npu-smi info`` was not recorded, so no NPU is known to be running)."""
    chip_map = parse_chip_map(chip_map_text)
    if not chip_map:
        raise ParseError("npu-smi info -m lists no NPU (no row with numeric ids)")
    if info_text is not None:
        check_info_text(info_text)
    else:
        info_text = ""
    return HostFacts(
        soc=soc or detect_soc(chip_map_text, info_text, chip_map),
        numa={node: tuple(cpus) for node, cpus in sorted(numa.items()) if cpus},
        allowed_cpus=tuple(sorted(set(allowed_cpus))),
        chip_map=chip_map,
        running_npus=tuple(parse_running_npus(info_text, chip_map)),
        affinity={n: tuple(c) for n, c in parse_topo_affinity(topo_text).items()},
        threads_per_core=threads_per_core,
        visible_devices=visible_devices,
        arch=arch,
        pcie=dict(pcie or {}),
        source=source,
    )

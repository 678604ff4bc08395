"""The plan data: options, one NPU's CPU pool split into roles, the whole plan and its
JSON/table renderings (``plan --json`` is a public interface)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ascend_topology.cpulist import check_cpu_id, format_cpu_list
from ascend_topology.errors import PlanError, TopologyError

MODES = ("global_slice", "topo_affinity", "cluster_pools", "none")


def _cpus(values: Any) -> tuple[int, ...]:
    """CPU ids of a plan object in their order, each under the ``MAX_CPU_ID`` cap."""
    return tuple(check_cpu_id(c) for c in values)


@dataclass(frozen=True)
class PlanOptions:
    """Planning choices (ascend-config's ``cpu_binding_config`` carries the same three).

    ``min_cpus_per_npu``: smallest pool an NPU may get; None (the default) means the SoC's
    default, ``default_min_cpus_per_npu(soc)``: 3 on Ascend 950 (all-main pools, no IRQ,
    acl or release CPUs there), else 5 (2 IRQ + main + acl + release). A host that cannot
    give every NPU this many gets a plan with ``problems``. A plan made by ``plan()`` holds
    the resolved integer.
    ``bind_irq``: reserve the first two pool CPUs for the NPU's IRQs and bind them on apply.
    ``migrate_memory``: run ``migratepages`` to the pool's NUMA node on apply (if installed).
    """

    min_cpus_per_npu: int | None = None
    bind_irq: bool = False
    migrate_memory: bool = True

    def __post_init__(self) -> None:
        if self.min_cpus_per_npu is None:
            return
        if isinstance(self.min_cpus_per_npu, bool) or not isinstance(self.min_cpus_per_npu, int):
            raise PlanError(
                f"min_cpus_per_npu must be an integer or None; got {self.min_cpus_per_npu!r}")
        if not 1 <= self.min_cpus_per_npu <= 1024:
            raise PlanError(f"min_cpus_per_npu must be 1..1024; got {self.min_cpus_per_npu}")


@dataclass(frozen=True)
class NpuPlan:
    """One NPU's pool: ``cpus`` (the whole pool) split into ``main`` (the process and its
    other threads), ``acl`` (acl_thread), ``release`` (release_thread) and optional ``irq``
    CPUs; ``numa_node`` is its affine node, ``quality`` the share of ``cpus`` on that node."""

    npu: int
    numa_node: int
    cpus: tuple[int, ...]
    main: tuple[int, ...]
    acl: tuple[int, ...] = ()
    release: tuple[int, ...] = ()
    irq: tuple[int, ...] = ()
    quality: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """The ``plan --json`` entry of this NPU."""
        return {
            "npu": self.npu,
            "numa_node": self.numa_node,
            "cpus": list(self.cpus),
            "main": list(self.main),
            "acl": list(self.acl),
            "release": list(self.release),
            "irq": list(self.irq),
            "quality": round(self.quality, 4),
        }


@dataclass(frozen=True)
class Plan:
    """CPU pools for the NPUs this process plans for, in rank order (``npus[rank]``).

    When the hard rules cannot be met, ``problems`` says why with numbers and ``npus`` holds
    the best valid plan found (``ok`` is False; ``apply`` refuses it). ``notes`` explain
    choices such as fallbacks.
    """

    soc: str
    mode: str
    npus: tuple[NpuPlan, ...]
    options: PlanOptions = field(default_factory=PlanOptions)
    numa_nodes: tuple[int, ...] = ()
    uvb_cpus: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = ""

    @property
    def ok(self) -> bool:
        """True when every hard rule holds and the plan may be applied."""
        return not self.problems and bool(self.npus)

    @property
    def reason(self) -> str | None:
        """Why this plan cannot be applied (one line), or None when it can."""
        if self.ok:
            return None
        return "; ".join(self.problems) or "no NPU to plan for"

    def for_rank(self, rank: int) -> NpuPlan:
        """The pool of the worker with this local rank; ``PlanError`` when out of range."""
        if not 0 <= rank < len(self.npus):
            npus = ",".join(str(p.npu) for p in self.npus) or "none"
            raise PlanError(
                f"rank {rank} is out of range: the plan has {len(self.npus)} NPUs ({npus}); "
                "rank indexes the sorted running, visible NPUs"
            )
        return self.npus[rank]

    def to_dict(self) -> dict[str, Any]:
        """The ``plan --json`` object: ``{"npus": [...], "ok": ..., "problems": [...], ...}``."""
        return {
            "npus": [p.to_dict() for p in self.npus],
            "ok": self.ok,
            "soc": self.soc,
            "mode": self.mode,
            "options": {
                "min_cpus_per_npu": self.options.min_cpus_per_npu,
                "bind_irq": self.options.bind_irq,
                "migrate_memory": self.options.migrate_memory,
            },
            "numa_nodes": list(self.numa_nodes),
            "uvb_cpus": list(self.uvb_cpus),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "source": self.source,
        }

    def to_json(self) -> str:
        """``to_dict()`` as JSON, one line per NPU entry and per top-level key."""
        data = self.to_dict()
        entries = [f"    {json.dumps(e)}" for e in data.pop("npus")]
        lines = ['{\n  "npus": [', ",\n".join(entries), "  ],"] if entries else ['{\n  "npus": [],']
        rest = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in data.items()]
        return "\n".join([*lines, ",\n".join(rest), "}"])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Rebuild a plan from ``to_dict()`` output (e.g. to apply a plan made elsewhere)."""
        try:
            options = PlanOptions(**data.get("options", {}))
            npus = tuple(
                NpuPlan(
                    npu=int(e["npu"]),
                    numa_node=int(e["numa_node"]),
                    cpus=_cpus(e["cpus"]),
                    main=_cpus(e["main"]),
                    acl=_cpus(e.get("acl", ())),
                    release=_cpus(e.get("release", ())),
                    irq=_cpus(e.get("irq", ())),
                    quality=float(e.get("quality", 1.0)),
                )
                for e in data["npus"]
            )
            return cls(
                soc=str(data["soc"]),
                mode=str(data.get("mode", "none")),
                npus=npus,
                options=options,
                numa_nodes=tuple(int(n) for n in data.get("numa_nodes", ())),
                uvb_cpus=_cpus(data.get("uvb_cpus", ())),
                problems=tuple(str(p) for p in data.get("problems", ())),
                notes=tuple(str(n) for n in data.get("notes", ())),
                source=str(data.get("source", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"not a plan object: {exc!r:.200}") from None
        except TopologyError as exc:
            raise PlanError(f"not a plan object: {exc}") from None

    def explain(self, rank: int | None = None) -> str:
        """A readable table per NPU (NUMA node, quality, CPUs by role), then problems/notes.

        With ``rank``, that worker's row is marked.
        """
        opts = self.options
        head = (
            f"CPU plan for {self.soc} host {self.source or '(unnamed)'}\n"
            f"mode {self.mode}, min {opts.min_cpus_per_npu} CPUs/NPU, "
            f"IRQ binding {'on' if opts.bind_irq else 'off'}, "
            f"memory migration {'on' if opts.migrate_memory else 'off'}"
        )
        header = ["rank", "NPU", "NUMA", "on-node", "CPUs", "main", "acl", "release", "irq"]
        rows = [header]
        for i, p in enumerate(self.npus):
            mark = "*" if rank == i else ""
            rows.append(
                [
                    f"{mark}{i}",
                    str(p.npu),
                    str(p.numa_node),
                    f"{p.quality:.0%}",
                    *(format_cpu_list(c) or "-" for c in (p.cpus, p.main, p.acl, p.release, p.irq)),
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [head, ""]
        lines += [
            "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows
        ]
        if self.uvb_cpus:
            lines.append(f"UVB poll threads: {format_cpu_list(self.uvb_cpus)}")
        if self.problems:
            lines.append("")
            lines.append("NOT APPLICABLE as configured (the table shows the best valid plan):")
            lines += [f"  - {p}" for p in self.problems]
        if self.notes:
            lines.append("")
            lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

"""The recorded-host folder format (a public interface) and the bundled example hosts.

A folder holds the raw outputs ``npu-smi-info-m.txt``, ``npu-smi-info.txt``,
``npu-smi-info-t-topo.txt``, optionally ``lscpu-e.txt`` (``lscpu -e=CPU,NODE``), and
``host.json``: ``{"arch": "aarch64", "soc": "A2", "allowed_cpus": "0-191",
"threads_per_core": 1, "numa": {"0": "0-47", ...}, "visible_devices": "0,1"}`` where ``numa``
may be omitted when ``lscpu-e.txt`` exists and ``visible_devices`` is optional.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from ascend_topology.cpulist import format_cpu_list, parse_cpu_list
from ascend_topology.errors import RecordedHostError, TopologyError
from ascend_topology.facts import SOCS, HostFacts, build_host_facts, parse_visible_devices
from ascend_topology.system import parse_lscpu_nodes

CHIP_MAP_FILE = "npu-smi-info-m.txt"
INFO_FILE = "npu-smi-info.txt"
TOPO_FILE = "npu-smi-info-t-topo.txt"
LSCPU_FILE = "lscpu-e.txt"
HOST_FILE = "host.json"
_EXAMPLES = "example_hosts"


def example_hosts() -> list[str]:
    """Names of the example hosts shipped with the package (e.g. ``"a2-8npu"``)."""
    root = resources.files("ascend_topology") / _EXAMPLES
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / HOST_FILE).is_file())


def example_host_dir(name: str) -> Path:
    """The folder of a bundled example host; raises ``RecordedHostError`` for unknown names."""
    names = example_hosts()
    if name not in names:
        raise RecordedHostError(f"unknown example host {name!r}; examples: {', '.join(names)}")
    return Path(str(resources.files("ascend_topology") / _EXAMPLES / name))


def resolve_host_dir(value: str | Path) -> Path:
    """A folder path, or the name of a bundled example host."""
    path = Path(value)
    if path.is_dir():
        return path
    if isinstance(value, str) and "/" not in value and value in example_hosts():
        return example_host_dir(value)
    raise RecordedHostError(
        f"--host {value}: not a folder and not an example host ({', '.join(example_hosts())})"
    )


def _read(folder: Path, name: str, *, required: bool) -> str | None:
    path = folder / name
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if required:
            raise RecordedHostError(f"recorded host {folder}: missing {name}") from None
        return None
    except OSError as exc:
        raise RecordedHostError(f"recorded host {folder}: cannot read {name}: {exc}") from None


def _cpus(folder: Path, key: str, value: Any) -> list[int]:
    if isinstance(value, list) and all(isinstance(v, int) and v >= 0 for v in value):
        return sorted(set(value))
    if isinstance(value, str):
        try:
            return parse_cpu_list(value)
        except TopologyError as exc:
            raise RecordedHostError(f"{folder / HOST_FILE}: {key}: {exc}") from None
    raise RecordedHostError(
        f"{folder / HOST_FILE}: {key} must be a CPU list like '0-47,96-143'; got {value!r}"
    )


def _numa(folder: Path, meta: dict[str, Any]) -> dict[int, list[int]]:
    raw = meta.get("numa")
    if raw is None:
        lscpu = _read(folder, LSCPU_FILE, required=False)
        if lscpu is None:
            raise RecordedHostError(
                f"recorded host {folder}: host.json has no 'numa' and there is no {LSCPU_FILE}"
            )
        try:
            return parse_lscpu_nodes(lscpu)
        except TopologyError as exc:
            raise RecordedHostError(f"{folder / LSCPU_FILE}: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise RecordedHostError(f"{folder / HOST_FILE}: numa must be like {{\"0\": \"0-47\"}}")
    numa: dict[int, list[int]] = {}
    for node, cpus in raw.items():
        if not (isinstance(node, str) and node.isdigit() and node.isascii() and len(node) < 6):
            raise RecordedHostError(f"{folder / HOST_FILE}: numa key {node!r} is not a node id")
        numa[int(node)] = _cpus(folder, f"numa[{node}]", cpus)
    return numa


def _meta(folder: Path) -> dict[str, Any]:
    text = _read(folder, HOST_FILE, required=True) or ""
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise RecordedHostError(f"{folder / HOST_FILE}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise RecordedHostError(f"{folder / HOST_FILE}: must hold a JSON object")
    soc = meta.get("soc")
    if soc is not None and soc not in SOCS:
        raise RecordedHostError(f"{folder / HOST_FILE}: soc {soc!r} is not one of {SOCS}")
    tpc = meta.get("threads_per_core", 1)
    if not isinstance(tpc, int) or isinstance(tpc, bool) or not 1 <= tpc <= 8:
        raise RecordedHostError(f"{folder / HOST_FILE}: threads_per_core must be 1..8; got {tpc!r}")
    if not isinstance(meta.get("arch", ""), str):
        raise RecordedHostError(f"{folder / HOST_FILE}: arch must be a string")
    return meta


def load_recorded_host(path: str | Path) -> HostFacts:
    """Load a recorded-host folder (or a bundled example name) into ``HostFacts``.

    Raises ``RecordedHostError``/``ParseError`` (both ``TopologyError``) with one clear line.
    """
    folder = resolve_host_dir(path)
    meta = _meta(folder)
    numa = _numa(folder, meta)
    allowed = meta.get("allowed_cpus")
    allowed_cpus = (
        sorted({c for cpus in numa.values() for c in cpus})
        if allowed is None
        else _cpus(folder, "allowed_cpus", allowed)
    )
    visible = meta.get("visible_devices")
    if isinstance(visible, list):
        visible = ",".join(str(v) for v in visible)
    if visible is not None and not isinstance(visible, str):
        raise RecordedHostError(f"{folder / HOST_FILE}: visible_devices must be like '0,1'")
    pcie_raw = meta.get("pcie", {})
    if not isinstance(pcie_raw, dict) or not all(
        isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 6 and isinstance(v, str)
        for k, v in pcie_raw.items()
    ):
        raise RecordedHostError(f"{folder / HOST_FILE}: pcie must be like {{'0': '0000:c1:00.0'}}")
    try:
        return build_host_facts(
            chip_map_text=_read(folder, CHIP_MAP_FILE, required=True) or "",
            info_text=_read(folder, INFO_FILE, required=False) or "",
            topo_text=_read(folder, TOPO_FILE, required=False) or "",
            numa=numa,
            allowed_cpus=allowed_cpus,
            threads_per_core=int(meta.get("threads_per_core", 1)),
            visible_devices=parse_visible_devices(visible),
            soc=meta.get("soc"),
            arch=str(meta.get("arch", "unknown")),
            pcie={int(k): v.lower() for k, v in pcie_raw.items()},
            source=str(folder),
        )
    except RecordedHostError:
        raise
    except TopologyError as exc:
        raise RecordedHostError(f"recorded host {folder}: {exc}") from None


def write_recorded_host(
    folder: Path,
    *,
    outputs: dict[str, str],
    meta: dict[str, Any],
) -> list[Path]:
    """Write raw outputs (file name -> text) and ``host.json``; returns the files written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in outputs.items():
            (folder / name).write_text(text, encoding="utf-8")
            written.append(folder / name)
        (folder / HOST_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise RecordedHostError(f"cannot write recorded host to {folder}: {exc}") from None
    return [*written, folder / HOST_FILE]


def host_meta(facts: HostFacts) -> dict[str, Any]:
    """The ``host.json`` object for facts (what ``capture`` records)."""
    meta: dict[str, Any] = {
        "arch": facts.arch,
        "soc": facts.soc,
        "allowed_cpus": format_cpu_list(facts.allowed_cpus),
        "threads_per_core": facts.threads_per_core,
        "numa": {str(n): format_cpu_list(c) for n, c in sorted(facts.numa.items())},
    }
    if facts.visible_devices is not None:
        meta["visible_devices"] = ",".join(str(d) for d in facts.visible_devices)
    if facts.pcie:
        meta["pcie"] = {str(n): a for n, a in sorted(facts.pcie.items())}
    return meta

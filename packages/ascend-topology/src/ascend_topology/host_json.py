"""``host.json`` of a recorded host: parsed and checked into ``HostMeta``, every invalid value
reported at once (one problem per line)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ascend_topology.cpulist import check_cpu_ids, parse_cpu_list
from ascend_topology.errors import RecordedHostError, TopologyError
from ascend_topology.facts import SOCS, overlapping_node, parse_visible_devices
from ascend_topology.npu_smi import is_pci_address

MAX_THREADS_PER_CORE = 8
_MAX_ID_DIGITS = 5


@dataclass(frozen=True)
class HostMeta:
    """The checked values of one ``host.json`` (None: the key was absent)."""

    arch: str = "unknown"
    soc: str | None = None
    threads_per_core: int = 1
    allowed_cpus: list[int] | None = None
    numa: dict[int, list[int]] | None = None
    visible_devices: tuple[int, ...] | None = None
    pcie: dict[int, str] = field(default_factory=dict)


def _small_id(key: object) -> int | None:
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= _MAX_ID_DIGITS:
        return int(key)
    return None


def cpu_list_value(value: Any) -> list[int]:
    """A JSON CPU list: a ``"0-47,96-143"`` string or a list of integer CPU ids, both under
    the same ``MAX_CPU_ID`` cap. Raises ``ParseError``."""
    if isinstance(value, str):
        return parse_cpu_list(value)
    if isinstance(value, list):
        return check_cpu_ids(value)
    raise TopologyError(f"must be a CPU list like '0-47,96-143' or [0, 1]; got {value!r:.60}")


def _numa(raw: Any) -> dict[int, list[int]]:
    if not isinstance(raw, dict) or not raw:
        raise TopologyError('must be like {"0": "0-47", "1": "48-95"}')
    numa: dict[int, list[int]] = {}
    node_of: dict[int, int] = {}  # checked node by node, so the nodes hold 8192 CPUs at most
    for key, cpus in raw.items():
        node = _small_id(key)
        if node is None:
            raise TopologyError(f"key {key!r:.40} is not a node id (0..99999)")
        try:
            numa[node] = cpu_list_value(cpus)
        except TopologyError as exc:
            raise TopologyError(f"node {node}: {exc}") from None
        problem = overlapping_node(node_of, node, numa[node])
        if problem:
            raise TopologyError(f"nodes overlap: {problem}")
        node_of.update(dict.fromkeys(numa[node], node))
    return numa


def _visible(raw: Any) -> tuple[int, ...] | None:
    if isinstance(raw, list):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
            raise TopologyError(f"must be like '0,1' or [0, 1]; got {raw!r:.60}")
        raw = ",".join(str(v) for v in raw)
    if raw is not None and not isinstance(raw, str):
        raise TopologyError(f"must be like '0,1' or [0, 1]; got {raw!r:.60}")
    return parse_visible_devices(raw)


def _pcie(raw: Any) -> dict[int, str]:
    if not isinstance(raw, dict):
        raise TopologyError("must be like {\"0\": \"0000:c1:00.0\"}")
    pcie: dict[int, str] = {}
    for key, address in raw.items():
        npu = _small_id(key)
        if npu is None or not isinstance(address, str) or not is_pci_address(address.lower()):
            raise TopologyError(f"must be like {{\"0\": \"0000:c1:00.0\"}}; got {key!r:.20}: "
                                f"{address!r:.40}")
        if address.lower() in pcie.values():
            other = next(n for n, a in pcie.items() if a == address.lower())
            raise TopologyError(f"NPUs {other} and {npu} are both given the address "
                                f"{address.lower()}; each NPU has its own")
        pcie[npu] = address.lower()
    return pcie


def _soc(raw: Any) -> str:
    if raw not in SOCS:
        raise TopologyError(f"{raw!r:.40} is not one of {', '.join(SOCS)}")
    return str(raw)


def _threads(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_THREADS_PER_CORE:
        raise TopologyError(f"must be 1..{MAX_THREADS_PER_CORE}; got {raw!r:.40}")
    return raw


def _arch(raw: Any) -> str:
    if not isinstance(raw, str) or "\0" in raw or len(raw) > 64 or not raw.isprintable():
        raise TopologyError(f"must be a short string like 'aarch64'; got {raw!r:.40}")
    return raw


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice (two contradicting values, of which
    ``json`` would keep the last silently) is refused."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(f"the key {key!r} is given twice; give each key once")
        found[key] = value
    return found


def parse_host_json(text: str, where: str) -> HostMeta:
    """Parse ``host.json`` text; ``RecordedHostError`` lists every invalid value, one
    ``"<where>: <key>: ..."`` line each."""
    try:
        meta = json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as exc:
        raise RecordedHostError(f"{where}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise RecordedHostError(f"{where}: not valid JSON ({detail:.120})") from None
    if not isinstance(meta, dict):
        raise RecordedHostError(f"{where}: must hold a JSON object")
    checks: list[tuple[str, Callable[[Any], Any], Any]] = [
        ("arch", _arch, "unknown"),
        ("soc", _soc, None),
        ("threads_per_core", _threads, 1),
        ("allowed_cpus", cpu_list_value, None),
        ("numa", _numa, None),
        ("visible_devices", _visible, None),
        ("pcie", _pcie, {}),
    ]
    values: dict[str, Any] = {}
    known = [key for key, _, _ in checks]
    # A misspelt key ("visable_devices") would otherwise be ignored without a word.
    problems = [f"{where}: unknown key {key!r:.40}; known: {', '.join(known)}"
                for key in meta if key not in known]
    for key, check, default in checks:
        raw = meta.get(key)
        if raw is None:
            values[key] = default
            continue
        try:
            values[key] = check(raw)
        except TopologyError as exc:
            problems.append(f"{where}: {key}: {exc}")
    if problems:
        raise RecordedHostError(*problems)
    return HostMeta(**values)

"""Reading the live host (npu-smi, sysfs, affinity) and capturing it as a recorded host."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from ascend_topology.errors import CommandError, TopologyError
from ascend_topology.facts import HostFacts, build_host_facts, parse_visible_devices
from ascend_topology.npu_smi import parse_board_pcie
from ascend_topology.rc_mode import rc_mode, read_lspci
from ascend_topology.recorded import (
    CHIP_MAP_FILE,
    INFO_FILE,
    LSCPU_FILE,
    LSPCI_FILE,
    TOPO_FILE,
    check_capture_folder,
    host_meta,
    read_host_meta,
    resolve_host_dir,
    write_recorded_host,
)
from ascend_topology.system import (
    DEFAULT_TIMEOUT_S,
    read_allowed_cpus,
    read_numa,
    read_threads_per_core,
    run_command,
)

VISIBLE_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"


def _npu_smi(args: list[str], timeout: float) -> str:
    try:
        return run_command(["npu-smi", *args], timeout=timeout)
    except CommandError as exc:
        if "not found on PATH" in str(exc):
            raise CommandError(
                "npu-smi was not found on PATH, so this host shows no Ascend NPU (driver not "
                "installed or not mounted into the container); plan a recorded host with "
                "--host DIR or an example name instead"
            ) from None
        raise


def _read_live(
    soc: str | None, environ: Mapping[str, str] | None, timeout: float
) -> tuple[HostFacts, dict[str, str]]:
    env = os.environ if environ is None else environ
    outputs = {
        CHIP_MAP_FILE: _npu_smi(["info", "-m"], timeout),
        INFO_FILE: _npu_smi(["info"], timeout),
    }
    try:
        outputs[TOPO_FILE] = _npu_smi(["info", "-t", "topo"], timeout)
    except CommandError:
        outputs[TOPO_FILE] = ""  # some boards have no topology query; the planner copes
    numa, lscpu_text = read_numa()
    if lscpu_text is not None:
        outputs[LSCPU_FILE] = lscpu_text
    facts = build_host_facts(
        chip_map_text=outputs[CHIP_MAP_FILE],
        info_text=outputs[INFO_FILE],
        topo_text=outputs[TOPO_FILE],
        numa=numa,
        allowed_cpus=read_allowed_cpus(),
        threads_per_core=read_threads_per_core(),
        visible_devices=parse_visible_devices(env.get(VISIBLE_DEVICES_ENV)),
        soc=soc,
        arch=platform.machine() or "unknown",
    )  # source: "live" by default
    # Only a 310P host can be an RC device; lspci is not run on the others.
    lspci = read_lspci() if facts.soc == "310P" else None
    if lspci is not None:
        outputs[LSPCI_FILE] = lspci
    rc_device, rc_source = rc_mode(facts.soc, lspci, "lspci")
    return replace(facts, rc_device=rc_device, rc_source=rc_source), outputs


def read_live_host(
    *,
    soc: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> HostFacts:
    """Read this host: npu-smi tables, NUMA layout, SMT, allowed CPUs, visible devices.

    ``soc`` overrides detection; ``environ`` (default ``os.environ``, read only) supplies
    ``ASCEND_RT_VISIBLE_DEVICES``. Raises a ``TopologyError`` with one clear line, e.g. when
    npu-smi is missing.
    """
    facts, _ = _read_live(soc, environ, timeout)
    return facts


def capture_live_host(
    folder: str | Path,
    *,
    soc: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    force: bool = False,
) -> list[Path]:
    """Record this host into ``folder`` (recorded-host format); returns the files written.

    A ``folder`` that already holds entries is refused unless ``force``; symbolic links are
    never followed, and a failure leaves nothing behind (see ``write_recorded_host``). Raises
    ``TopologyError``.
    """
    check_capture_folder(Path(folder), force=force)  # fail fast, before running npu-smi
    facts, outputs = _read_live(soc, environ, timeout)
    return write_recorded_host(Path(folder), outputs=outputs, meta=host_meta(facts),
                               force=force)


def threads_per_core(host: str | Path | None = None) -> int:
    """SMT threads per physical core: of this host (sysfs, else ``lscpu``, else 1) when
    ``host`` is None, else of a recorded host (folder or example name; its ``host.json``).

    Needs no npu-smi. Raises ``RecordedHostError`` for an unreadable recorded host.
    """
    if host is None:
        return read_threads_per_core()
    return read_host_meta(resolve_host_dir(host)).threads_per_core


def read_board_pcie(npu: int, soc: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> str | None:
    """PCIe address of a logical NPU via ``npu-smi info -t board`` (A3: card = npu // 2)."""
    if soc == "A3":
        args = ["info", "-t", "board", "-i", str(npu // 2), "-c", str(npu % 2)]
    else:
        args = ["info", "-t", "board", "-i", str(npu)]
    try:
        return parse_board_pcie(_npu_smi(args, timeout))
    except TopologyError:
        return None

"""The device: npu-smi, its NPUs and their SoC, driver and firmware versions, visible devices (live,
or from an ascend-topology recorded-host folder).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_ascend.doctor.findings import FAIL, INFO, NPU, OK, WARN, Finding
from vllm_ascend.doctor.host_paths import HostPaths

INFO_FILE = "npu-smi-info.txt"
BOARD_FILE = "npu-smi-info-t-board.txt"
NPU_SMI_TIMEOUT_S = 20.0
_DRIVER = re.compile(r"npu-smi\s+\S+\s+Version:\s*(\S+)")
_FIRMWARE = re.compile(r"Firmware\s+Version\s*:\s*(\S+)", re.IGNORECASE)
_NAME_ROW = re.compile(r"^\|\s*(\d+)\s+([A-Za-z0-9][\w.-]*)\s*\|")


@dataclass(frozen=True)
class DeviceView:
    """What npu-smi showed: host facts, the status table, the board query, or why there is none."""

    facts: Any | None
    info_text: str
    board_text: str | None
    problem: str | None
    source: str


def parse_driver_version(info_text: str) -> str | None:
    found = _DRIVER.search(info_text)
    return found.group(1) if found else None


def parse_firmware_version(board_text: str | None) -> str | None:
    found = _FIRMWARE.search(board_text or "")
    return found.group(1) if found else None


def parse_npu_names(info_text: str) -> dict[int, str]:
    """``{npu id: chip name}`` from the status table's first row of each NPU."""
    names: dict[int, str] = {}
    for line in info_text.splitlines():
        found = _NAME_ROW.match(line)
        if found and not found.group(2).isdigit():
            names.setdefault(int(found.group(1)), found.group(2))
    return names


def _recorded_text(folder: Path, name: str) -> str | None:
    """An optional file of a recorded host (the folder format's rules), None when absent."""
    import ascend_topology as topo
    from ascend_topology.safe_io import RECORDED_FILE_LIMIT, read_limited

    try:
        return read_limited(folder / name, RECORDED_FILE_LIMIT, strict=True)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise topo.RecordedHostError(
            f"recorded host {folder}: cannot read {name}: {exc.strerror or exc}") from None
    except topo.TopologyError as exc:
        raise topo.RecordedHostError(f"recorded host {folder}: {exc}") from None


def read_recorded(folder: Path) -> DeviceView:
    """The recorded host ``folder``; ``RecordedHostError`` names what breaks the format."""
    import ascend_topology as topo

    facts = topo.load_recorded_host(folder)
    info = _recorded_text(folder, INFO_FILE) or ""
    board = _recorded_text(folder, BOARD_FILE)
    return DeviceView(facts, info, board, None, f"recorded host {folder}")


def read_live(paths: HostPaths) -> DeviceView:
    import ascend_topology as topo
    from ascend_topology.system import run_command

    if shutil.which("npu-smi", path=paths.environ.get("PATH")) is None:
        return DeviceView(None, "", None, "npu-smi is not on PATH (no Ascend driver installed "
                          "or not mounted into this container)", "this host")
    try:
        facts = topo.read_live_host(environ=paths.environ, timeout=NPU_SMI_TIMEOUT_S)
        info = run_command(["npu-smi", "info"], timeout=NPU_SMI_TIMEOUT_S)
    except topo.TopologyError as exc:
        return DeviceView(None, "", None, str(exc), "this host")
    board = None
    if facts.chip_map:
        first = sorted(int(n) for n in facts.chip_map)[0]
        try:
            board = run_command(["npu-smi", "info", "-t", "board", "-i", str(first)],
                                timeout=NPU_SMI_TIMEOUT_S)
        except topo.TopologyError:
            board = None
    return DeviceView(facts, info, board, None, "this host")


def _visible(paths: HostPaths, logical: list[int]) -> Finding:
    value = paths.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if value is None:
        return Finding("visible-devices", INFO, f"ASCEND_RT_VISIBLE_DEVICES is unset: all "
                       f"{len(logical)} NPUs are visible", scope=NPU)
    # Local: as read_recorded's, ascend-topology is imported only by the checks that read NPUs.
    from ascend_topology.errors import ParseError
    from ascend_topology.facts import parse_visible_devices

    # ascend-topology's rule (ASCII ids, each once); set but blank names no NPU here.
    try:
        wanted = list(parse_visible_devices(value) or ())
        problem = None if wanted else "names no NPU"
    except ParseError as exc:
        wanted, problem = [], f"is refused: {exc}"
    unknown = sorted(set(wanted) - set(logical))
    if problem is None and unknown:
        problem = f"names NPUs {unknown} this host does not have"
    if problem is not None:
        return Finding("visible-devices", FAIL, f"ASCEND_RT_VISIBLE_DEVICES={value!r} {problem} "
                       f"(NPUs: {logical})", scope=NPU,
                       fix=f"export ASCEND_RT_VISIBLE_DEVICES={','.join(map(str, logical))} "
                           "(or unset it)")
    return Finding("visible-devices", OK, f"ASCEND_RT_VISIBLE_DEVICES={value}: NPUs {wanted} "
                   "visible", scope=NPU)


def device_findings(view: DeviceView, paths: HostPaths) -> list[Finding]:
    if view.facts is None:
        return [Finding("npu", FAIL, f"no NPU visible: {view.problem}", scope=NPU,
                        fix="install the Ascend driver and firmware (npu-smi comes with the "
                            "driver); in a container, mount /dev/davinci*, /dev/davinci_manager, "
                            "/usr/local/Ascend/driver and npu-smi")]
    facts = view.facts
    logical = sorted({int(v) for chips in facts.chip_map.values() for v in chips.values()})
    names = parse_npu_names(view.info_text)
    driver = parse_driver_version(view.info_text)
    firmware = parse_firmware_version(view.board_text)
    per_npu = ", ".join(f"NPU {n}: {names.get(n, '?')}" for n in sorted(names)) or "no names"
    findings = [
        Finding("npu", OK if logical else FAIL,
                f"{len(logical)} NPUs ({view.source}), SoC {facts.soc}; {per_npu}",
                scope=NPU, details={"soc": facts.soc, "names": names, "logical": logical},
                fix=None if logical else "check the driver with npu-smi info"),
        Finding("driver", OK if driver else WARN,
                f"driver {driver or 'version not shown by npu-smi'}; firmware "
                f"{firmware or 'not read (npu-smi info -t board -i 0 shows it)'}", scope=NPU,
                details={"driver": driver, "firmware": firmware}),
    ]
    findings.append(_visible(paths, logical))
    return findings

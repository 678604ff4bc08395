"""The recorded-host folder format (a public interface) and the bundled example hosts.

A folder holds the raw outputs ``npu-smi-info-m.txt``, ``npu-smi-info.txt``,
``npu-smi-info-t-topo.txt``, optionally ``lscpu-e.txt`` (``lscpu -e=CPU,NODE``), and
``host.json``: ``{"arch": "aarch64", "soc": "A2", "allowed_cpus": "0-191",
"threads_per_core": 1, "numa": {"0": "0-47", ...}, "visible_devices": "0,1"}`` where ``numa``
may be omitted when ``lscpu-e.txt`` exists and ``visible_devices`` is optional. An optional
``lspci.txt`` (``lspci``) tells a 310P host's RC mode.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from ascend_topology.cpulist import format_cpu_list
from ascend_topology.errors import RecordedHostError, TopologyError
from ascend_topology.facts import HostFacts, build_host_facts
from ascend_topology.host_json import HostMeta, parse_host_json
from ascend_topology.npu_smi import named_soc
from ascend_topology.rc_mode import rc_mode
from ascend_topology.safe_io import (
    HOST_JSON_LIMIT,
    RECORDED_FILE_LIMIT,
    check_output_dir,
    check_path_text,
    discard_staging_dir,
    open_staging_dir,
    publish_staging_dir,
    read_limited,
    write_new_file,
)
from ascend_topology.system import parse_lscpu_nodes

CHIP_MAP_FILE = "npu-smi-info-m.txt"
INFO_FILE = "npu-smi-info.txt"
TOPO_FILE = "npu-smi-info-t-topo.txt"
LSCPU_FILE = "lscpu-e.txt"
LSPCI_FILE = "lspci.txt"
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
    try:
        check_path_text(str(value), "--host")
    except TopologyError as exc:
        raise RecordedHostError(str(exc)) from None
    path = Path(value)
    try:
        is_dir = path.is_dir()
    except OSError as exc:  # too long, or a folder on the way that cannot be entered
        text = str(value)
        shown = text if len(text) <= 200 else f"{text[:200]}..."
        raise RecordedHostError(f"--host {shown!r}: cannot be inspected: {exc.strerror}"
                                ) from None
    if is_dir:
        return path
    if isinstance(value, str) and value in example_hosts():  # names hold no "/"
        return example_host_dir(value)
    raise RecordedHostError(
        f"--host {str(value)!r}: not a folder and not an example host "
        f"({', '.join(example_hosts())})"
    )


def _read(folder: Path, name: str, limit: int = RECORDED_FILE_LIMIT) -> str:
    """A required file of the folder (``RecordedHostError`` when missing or unsafe)."""
    text = _read_optional(folder, name, limit)
    if text is None:
        raise RecordedHostError(f"recorded host {folder}: missing {name}")
    return text


def _read_optional(folder: Path, name: str, limit: int = RECORDED_FILE_LIMIT) -> str | None:
    try:
        return read_limited(folder / name, limit, strict=True)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordedHostError(
            f"recorded host {folder}: cannot read {name}: {exc.strerror}") from None
    except TopologyError as exc:
        raise RecordedHostError(f"recorded host {folder}: {exc}") from None


def read_host_meta(folder: Path) -> HostMeta:
    """The checked ``host.json`` of a recorded-host folder (``RecordedHostError``)."""
    return parse_host_json(_read(folder, HOST_FILE, HOST_JSON_LIMIT), str(folder / HOST_FILE))


def _numa(folder: Path, meta: HostMeta) -> dict[int, list[int]]:
    if meta.numa is not None:
        return meta.numa
    lscpu = _read_optional(folder, LSCPU_FILE)
    if lscpu is None:
        raise RecordedHostError(
            f"recorded host {folder}: host.json has no 'numa' and there is no {LSCPU_FILE}"
        )
    try:
        return parse_lscpu_nodes(lscpu)
    except TopologyError as exc:
        raise RecordedHostError(f"{folder / LSCPU_FILE}: {exc}") from None


def load_recorded_host(path: str | Path) -> HostFacts:
    """Load a recorded-host folder (or a bundled example name) into ``HostFacts``.

    Raises ``RecordedHostError`` (a ``TopologyError``) naming every problem, one line each.
    Files must be regular files (no symbolic links, FIFOs or devices) within the size limits
    of ``safe_io`` (``host.json`` 1 MiB, other files 4 MiB).
    """
    folder = resolve_host_dir(path)
    meta = read_host_meta(folder)
    numa = _numa(folder, meta)
    allowed_cpus = (
        sorted({c for cpus in numa.values() for c in cpus})
        if meta.allowed_cpus is None
        else meta.allowed_cpus
    )
    outside = sorted(set(allowed_cpus).difference(*numa.values()))
    if outside:
        # The live host tolerates this (a CPU brought online between two reads); a recorded
        # host states both sets at once, so they contradict each other.
        raise RecordedHostError(
            f"recorded host {folder}: allowed CPUs {format_cpu_list(outside):.60} are in no "
            f"NUMA node (the nodes hold CPUs "
            f"{format_cpu_list(c for cpus in numa.values() for c in cpus):.60})")
    lspci = _read_optional(folder, LSPCI_FILE)
    chip_map_text = _read(folder, CHIP_MAP_FILE)
    info_text = _read_optional(folder, INFO_FILE)
    try:
        facts = build_host_facts(
            chip_map_text=chip_map_text,
            info_text=info_text,
            topo_text=_read_optional(folder, TOPO_FILE) or "",
            numa=numa,
            allowed_cpus=allowed_cpus,
            threads_per_core=meta.threads_per_core,
            visible_devices=meta.visible_devices,
            soc=meta.soc,
            arch=meta.arch,
            pcie=meta.pcie,
            source=str(folder),
        )
    except RecordedHostError:
        raise
    except TopologyError as exc:
        raise RecordedHostError(f"recorded host {folder}: {exc}") from None
    named = named_soc(chip_map_text, info_text or "", facts.chip_map)
    if meta.soc is not None and named is not None and meta.soc != named:
        # A recording states what the host was; an override is the command's --soc.
        raise RecordedHostError(
            f"recorded host {folder}: host.json says soc {meta.soc!r} but npu-smi's chip "
            f"names say {named!r}; record the soc the chips have (override with --soc)")
    rc_device, rc_source = rc_mode(facts.soc, lspci, LSPCI_FILE)
    return replace(facts, rc_device=rc_device, rc_source=rc_source)


def check_capture_folder(folder: Path, *, force: bool) -> None:
    """Refuse, before reading the host, a ``capture`` folder that ``write_recorded_host``
    would refuse (``RecordedHostError``)."""
    with _write_errors(folder):
        check_output_dir(folder, force=force)


@contextmanager
def _write_errors(folder: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise RecordedHostError(
            f"cannot write recorded host to {folder}: {exc.strerror or exc}") from None
    except TopologyError as exc:
        raise RecordedHostError(f"cannot write recorded host: {exc}") from None


def write_recorded_host(
    folder: Path,
    *,
    outputs: dict[str, str],
    meta: dict[str, Any],
    force: bool = False,
) -> list[Path]:
    """Write raw outputs (file name -> text) and ``host.json``; returns the files written.

    Every file is first written into a fresh temporary folder next to ``folder``, which then
    becomes ``folder`` by one rename when ``folder`` does not exist: a failure (a full disk,
    an interrupt) leaves nothing behind. A ``folder`` that already holds entries is refused
    unless ``force``; then (and for an existing empty folder) the files are moved into it
    one rename each, after checking that none of their names is a folder there. ``folder``
    must not be a symbolic link, and no existing entry in it is opened or followed.
    """
    files = {**outputs, HOST_FILE: json.dumps(meta, indent=2) + "\n"}
    with _write_errors(folder):
        dir_fd, staging = open_staging_dir(folder, force=force)
    try:
        with _write_errors(folder):
            for name, text in files.items():
                write_new_file(dir_fd, name, text)
            publish_staging_dir(dir_fd, staging, folder, list(files), force=force)
    except BaseException:
        discard_staging_dir(staging)
        raise
    finally:
        os.close(dir_fd)
    return [folder / name for name in files]


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

"""310P root-complex (RC) mode: a pure rule over ``lspci`` output plus a small live reader.

An Atlas 310P either sits on a PCIe card in a host (EP mode: ``lspci`` lists it under a class
containing ``accelerators``) or is the host itself (RC mode, e.g. Atlas 200I: host and NPU
share memory, and no ``accelerators`` line appears). Other SoCs are never RC devices.
"""

from __future__ import annotations

from ascend_topology.errors import TopologyError
from ascend_topology.system import run_command

LSPCI_TIMEOUT_S = 10.0
_MARKER = "accelerators"


def is_rc_device(soc: str, lspci_text: str | None) -> bool:
    """True when a 310P host runs in RC mode: ``lspci_text`` has no line containing
    ``accelerators``. False for every other SoC, and when ``lspci`` could not be read
    (``lspci_text`` None), as the original plugin decides."""
    if soc != "310P" or lspci_text is None:
        return False
    return not any(_MARKER in line for line in lspci_text.splitlines())


def rc_mode(soc: str, lspci_text: str | None, source: str) -> tuple[bool, str]:
    """``(is_rc_device(...), where the answer came from)`` for ``HostFacts``; ``source``
    names the lspci text (``"lspci"``, ``"lspci.txt"``)."""
    if soc != "310P":
        return False, "not a 310P host"
    if lspci_text is None:
        return False, f"{source} unavailable; EP mode assumed"
    found = "no" if is_rc_device(soc, lspci_text) else "an"
    return is_rc_device(soc, lspci_text), f"{source}: {found} '{_MARKER}' line"


def read_lspci(*, timeout: float = LSPCI_TIMEOUT_S) -> str | None:
    """``lspci`` output of this host (at most ``safe_io.RECORDED_FILE_LIMIT`` bytes, like
    every command), or None when lspci is missing, fails or times out."""
    try:
        return run_command(["lspci"], timeout=timeout)  # output limit: RECORDED_FILE_LIMIT
    except TopologyError:
        return None

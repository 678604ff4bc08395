"""What the emulation's environment variables ask for, parsed and checked."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from torch_npu_double.record import load_record

NPUS_VAR = "VLLM_ASCEND_EMULATED_NPUS"
HBM_VAR = "VLLM_ASCEND_EMULATED_HBM_GIB"
SOC_VAR = "VLLM_ASCEND_EMULATED_SOC"
#: The CANN runtime's device-control variable: the NPUs this process sees, numbered from 0.
VISIBLE_VAR = "ASCEND_RT_VISIBLE_DEVICES"

DEFAULT_HBM_GIB = 32.0
#: An Atlas A2 part (Ascend910B1) from the wheel's ``SocVersion`` enum.
DEFAULT_SOC = "Ascend910B1"
MAX_NPUS = 64
#: The HBM range of one emulated NPU: at least 1 MiB (a smaller device cannot hold one tensor
#: block), at most 1 TiB (more than any Ascend part; the accounting stays in exact integers).
MIN_HBM_GIB = 1 / 1024
MAX_HBM_GIB = 1024.0


class EmulationSettingsError(ValueError):
    """An emulation variable holds a value the emulation cannot use."""


@dataclass(frozen=True)
class EmulationSettings:
    """The emulated host: how many NPUs, their HBM and their SoC; ``visible`` the host's NPUs
    this process sees (``ASCEND_RT_VISIBLE_DEVICES``; None: all)."""

    num_npus: int
    hbm_bytes: int
    soc_name: str
    soc_id: int
    visible: tuple[int, ...] | None = None

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / 2**30

    @property
    def visible_count(self) -> int:
        """The NPUs torch sees in this process (``npu:0`` .. ``npu:<count - 1>``)."""
        return self.num_npus if self.visible is None else len(self.visible)


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the emulation is switched on (the variable is set and not empty)."""
    env = os.environ if environ is None else environ
    return bool(env.get(NPUS_VAR, "").strip())


def from_environ(environ: Mapping[str, str] | None = None) -> EmulationSettings:
    """The settings the variables ask for; ``EmulationSettingsError`` names a bad value."""
    env = os.environ if environ is None else environ
    raw_npus = env.get(NPUS_VAR, "").strip()
    # ASCII digits only: int() would also take "1_0", "+2" and other scripts' digits.
    if not (raw_npus.isascii() and raw_npus.isdigit()):
        raise EmulationSettingsError(
            f"{NPUS_VAR}={raw_npus!r} is not a number of NPUs; allowed: 1..{MAX_NPUS}")
    num_npus = int(raw_npus)
    if not 1 <= num_npus <= MAX_NPUS:
        raise EmulationSettingsError(
            f"{NPUS_VAR}={num_npus} is outside 1..{MAX_NPUS}, the allowed number of NPUs")
    raw_hbm = env.get(HBM_VAR, "").strip() or str(DEFAULT_HBM_GIB)
    allowed = (f"allowed: a finite size in GiB from {MIN_HBM_GIB:g} (1 MiB) to "
               f"{MAX_HBM_GIB:g}")
    try:
        hbm_gib = float(raw_hbm) if raw_hbm.isascii() else math.nan
    except ValueError:
        hbm_gib = math.nan
    if math.isnan(hbm_gib):
        raise EmulationSettingsError(
            f"{HBM_VAR}={raw_hbm!r} is not a size in GiB (e.g. 32 or 0.5); {allowed}")
    if not MIN_HBM_GIB <= hbm_gib <= MAX_HBM_GIB:  # inf and 1e-12 included
        raise EmulationSettingsError(f"{HBM_VAR}={raw_hbm!r} is out of range; {allowed}")
    soc_name, soc_id = _soc(env.get(SOC_VAR, "").strip() or DEFAULT_SOC)
    visible = _visible(env.get(VISIBLE_VAR), num_npus)
    return EmulationSettings(num_npus, int(hbm_gib * 2**30), soc_name, soc_id, visible)


def _visible(raw: str | None, num_npus: int) -> tuple[int, ...] | None:
    """The visible NPUs: distinct ids of the emulated host, comma-separated (unset or empty:
    all). The runtime's documentation does not say what an id the host lacks does; the
    emulation refuses it rather than hide the device."""
    if raw is None or not raw.strip():
        return None
    allowed = (f"allowed: distinct NPU ids 0..{num_npus - 1} separated by commas "
               f"({NPUS_VAR}={num_npus})")
    ids: list[int] = []
    for part in raw.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or int(part) >= num_npus or int(part) in ids:
            raise EmulationSettingsError(f"{VISIBLE_VAR}={raw!r} names {part!r}; {allowed}")
        ids.append(int(part))
    return tuple(ids)


def _soc(raw: str) -> tuple[str, int]:
    """A SoC given by name (``Ascend910B1``) or id (``220``), as the wheel's enum has it."""
    socs: dict[str, int] = {
        name: sid for name, sid in load_record()["soc_versions"].items() if sid >= 0}
    if raw in socs:
        return raw, socs[raw]
    by_id = {sid: name for name, sid in socs.items()}
    if raw.lstrip("-").isdigit() and int(raw) in by_id:
        return by_id[int(raw)], int(raw)
    raise EmulationSettingsError(
        f"{SOC_VAR}={raw!r} is not a SoC of torch_npu's SocVersion enum; allowed: "
        + ", ".join(f"{name} ({sid})" for name, sid in sorted(socs.items(), key=lambda x: x[1])))

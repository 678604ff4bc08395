"""The Ascend SoC family of this host's NPU, from ``torch_npu.npu.get_soc_version()``'s id.

:data:`SOC_VERSIONS` is torch-npu 2.13.0's ``SocVersion`` enum
(``torch_npu_double/torch_npu-2.13.0.json``) with the family each member runs as (None:
unsupported). An id outside the enum runs as the one family whose block of ten it falls in, with
one warning; anything else is :class:`UnsupportedSocError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

FAMILIES: tuple[str, ...] = ("A2", "A3", "A5", "310P")

# (enum member, id, family or None): NpuVariables.h of torch-npu 2.13.0, in enum order.
SOC_VERSIONS: tuple[tuple[str, int, str | None], ...] = (
    ("Ascend910PremiumA", 100, None), ("Ascend910ProA", 101, None), ("Ascend910A", 102, None),
    ("Ascend910ProB", 103, None), ("Ascend910B", 104, None),
    ("Ascend310P1", 200, "310P"), ("Ascend310P2", 201, "310P"), ("Ascend310P3", 202, "310P"),
    ("Ascend310P4", 203, "310P"), ("Ascend310P5", 204, "310P"), ("Ascend310P7", 205, "310P"),
    ("Ascend910B1", 220, "A2"), ("Ascend910B2", 221, "A2"), ("Ascend910B2C", 222, "A2"),
    ("Ascend910B3", 223, "A2"), ("Ascend910B4", 224, "A2"), ("Ascend910B4_1", 225, "A2"),
    ("Ascend310B1", 240, None), ("Ascend310B2", 241, None), ("Ascend310B3", 242, None),
    ("Ascend310B4", 243, None),
    ("Ascend910_9391", 250, "A3"), ("Ascend910_9392", 251, "A3"),
    ("Ascend910_9381", 252, "A3"), ("Ascend910_9382", 253, "A3"),
    ("Ascend910_9372", 254, "A3"), ("Ascend910_9362", 255, "A3"),
    ("Ascend910_9363", 256, "A3"),
    ("Ascend950", 260, "A5"),
)
_BY_ID = {soc_id: (name, family) for name, soc_id, family in SOC_VERSIONS}
# The block of ten ids each family's parts take in the enum (an unknown id's candidates).
_FAMILY_BLOCKS = {"310P": 200, "A2": 220, "A3": 250, "A5": 260}


class UnsupportedSocError(RuntimeError):
    """The NPU is a part this plugin does not run on, or its SoC cannot be determined."""


@dataclass(frozen=True)
class SocDetection:
    """The SoC of this process's NPU: family, runtime id, enum name (or None) and its warnings."""

    soc: str
    soc_id: int
    name: str | None
    warnings: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        part = self.name or "a part torch-npu 2.13.0 does not list"
        return f"{self.soc} (SoC id {self.soc_id}, {part})"


def _supported() -> str:
    ranges = []
    for family in FAMILIES:
        ids = [soc_id for _, soc_id, fam in SOC_VERSIONS if fam == family]
        ranges.append(f"{family} {min(ids)}-{max(ids)}" if len(ids) > 1 else f"{family} {ids[0]}")
    return ", ".join(ranges)


def candidate_families(soc_id: int) -> tuple[str, ...]:
    """The families an id the enum does not list could belong to (its block of ten ids)."""
    return tuple(f for f, base in _FAMILY_BLOCKS.items() if base <= soc_id < base + 10)


def soc_for_id(soc_id: int) -> SocDetection:
    """The SoC for a runtime SoC id (the rules in the module docstring)."""
    known = _BY_ID.get(soc_id)
    if known is not None:
        name, family = known
        if family is None:
            raise UnsupportedSocError(
                f"this NPU is an {name} (SoC id {soc_id}), which vllm-ascend does not run on; "
                f"supported SoC ids: {_supported()}")
        return SocDetection(family, soc_id, name)
    candidates = candidate_families(soc_id)
    if len(candidates) != 1:
        raise UnsupportedSocError(
            f"unknown Ascend SoC id {soc_id}: torch-npu 2.13.0's SocVersion has no such id and it "
            f"lies in no family's block of ids; supported SoC ids: {_supported()}")
    family = candidates[0]
    warning = (f"unknown Ascend SoC id {soc_id} (not in torch-npu 2.13.0's SocVersion); it could "
               f"be {family} (ids {_FAMILY_BLOCKS[family]}-{_FAMILY_BLOCKS[family] + 9}), so the "
               f"platform runs as {family}")
    return SocDetection(family, soc_id, None, (warning,))


def detect_soc(read_id: Callable[[], object]) -> SocDetection:
    """The SoC from ``read_id``; :class:`UnsupportedSocError` when unreadable or unsupported."""
    try:
        raw = read_id()
    except Exception as exc:  # the runtime could not answer: say so, never guess
        raise UnsupportedSocError(
            f"cannot read the NPU's SoC: torch_npu.npu.get_soc_version() failed "
            f"({type(exc).__name__}: {exc})") from exc
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise UnsupportedSocError(
            f"torch_npu.npu.get_soc_version() returned {raw!r:.40}, not an int SoC id")
    return soc_for_id(raw)


def npu_smi_disagreement(soc: str, npu_smi_soc: str, described: str | None = None) -> str | None:
    """The warning when npu-smi's chip name differs from the runtime's SoC, else None."""
    if npu_smi_soc == soc:
        return None
    return (f"SoC mismatch: torch_npu reports {described or soc} but npu-smi's chip names read "
            f"as {npu_smi_soc}; using {soc} (the runtime's id)")

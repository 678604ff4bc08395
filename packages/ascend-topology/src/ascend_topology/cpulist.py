"""CPU-list text (``0-3,8``) to integers and back, plus IRQ affinity masks."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ascend_topology.errors import ParseError

# A CPU id above this is certainly a typo or garbage (Linux caps NR_CPUS at 8192).
MAX_CPU_ID = 8191
MAX_CPUS_PER_LIST = MAX_CPU_ID + 1
"""Most CPU ids one list may expand to, counting every range in full (so ``0-8191,0-8191``
is refused): a list names each CPU at most once, and the bound keeps a short text from
expanding into millions of ids."""
_MASK_BITS = 32
_CPU_LIST_RE = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*,?\s*$")


def _is_id(text: str) -> bool:
    # ASCII only ("²".isdigit() is True but int() rejects it); short, so int() stays cheap.
    text = text.strip()
    return text.isascii() and text.isdigit() and len(text) <= 6


def check_cpu_id(value: object, what: str = "CPU id") -> int:
    """``value`` as a CPU id, or ``ParseError``: an ``int`` (not a ``bool``) in
    0..``MAX_CPU_ID``. Every CPU id the package accepts passes through here or through
    ``parse_cpu_list``, which applies the same cap."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{what} {value!r:.40} is not an integer CPU id")
    if not 0 <= value <= MAX_CPU_ID:
        raise ParseError(f"{what} {value} is outside 0..{MAX_CPU_ID}")
    return value


def check_cpu_ids(values: Iterable[object], what: str = "CPU list") -> list[int]:
    """Every id of ``values`` through ``check_cpu_id``; returns them sorted, without
    duplicates. More than ``MAX_CPUS_PER_LIST`` values raise ``ParseError``."""
    cpus: set[int] = set()
    for count, value in enumerate(values, 1):
        if count > MAX_CPUS_PER_LIST:
            raise ParseError(f"{what} holds more than {MAX_CPUS_PER_LIST} CPU ids; "
                             f"a host has at most {MAX_CPUS_PER_LIST} CPUs")
        cpus.add(check_cpu_id(value, f"{what}: CPU"))
    return sorted(cpus)


def looks_like_cpu_list(text: str) -> bool:
    """True when ``text`` has the shape ``a-b,c,d-e`` (spaces tolerated)."""
    return bool(_CPU_LIST_RE.match(text))


def parse_cpu_list(text: str) -> list[int]:
    """Expand ``"0-2, 4, 6-8"`` into a sorted, duplicate-free list of CPU ids.

    An empty string gives ``[]``. Raises ``ParseError`` naming the bad part otherwise, and
    when the parts together expand to more than ``MAX_CPUS_PER_LIST`` ids (before removing
    duplicates: a bounded amount of work and memory for any text).
    """
    cpus: set[int] = set()
    expanded = 0
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        low_text, sep, high_text = part.partition("-")
        if not _is_id(low_text) or (sep and not _is_id(high_text)):
            raise ParseError(f"bad CPU list {text!r:.60}: {part!r:.20} is not 'N' or 'N-M'")
        low = int(low_text)
        high = int(high_text) if sep else low
        if high < low:
            raise ParseError(f"bad CPU list {text!r:.60}: range {part!r:.20} runs backwards")
        if high > MAX_CPU_ID:
            raise ParseError(f"bad CPU list {text!r:.60}: CPU {high} is outside 0..{MAX_CPU_ID}")
        expanded += high - low + 1
        if expanded > MAX_CPUS_PER_LIST:
            raise ParseError(f"bad CPU list {text!r:.60}: it expands to more than "
                             f"{MAX_CPUS_PER_LIST} CPU ids (each CPU may be named once)")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Compress CPU ids into ``"0-3,8"`` form (sorted, ranges for runs)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def cpu_to_mask(cpu: int) -> str:
    """The ``/proc/irq/<n>/smp_affinity`` mask selecting one CPU.

    Eight hex digits for the CPU's 32-bit group, then ``,00000000`` per lower group:
    ``cpu_to_mask(3) == "00000008"``, ``cpu_to_mask(35) == "00000008,00000000"``.
    ``ValueError`` for anything but a CPU id in 0..``MAX_CPU_ID``.
    """
    try:
        check_cpu_id(cpu)
    except ParseError as exc:
        raise ValueError(str(exc)) from None
    group, bit = divmod(cpu, _MASK_BITS)
    return f"{1 << bit:08x}" + ",00000000" * group

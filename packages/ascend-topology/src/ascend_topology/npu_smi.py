"""Pure parsers for npu-smi outputs (chip map, process table, topology, board info).

Every parser takes text and returns plain data; malformed rows are skipped, and anything it
cannot work with at all raises ``ParseError`` (never IndexError/ValueError).
"""

from __future__ import annotations

import re

from ascend_topology.cpulist import MAX_CPUS_PER_LIST, looks_like_cpu_list, parse_cpu_list
from ascend_topology.errors import ParseError

ChipMap = dict[int, dict[int, int]]
"""NPU id -> chip id -> logical NPU id (as in ``npu-smi info -m``)."""

_COLUMN_SPLIT = re.compile(r"\t+|\s{2,}")
_NPU_LABEL = re.compile(r"^NPU(\d+)$")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
# npu-smi ids are small; anything longer is garbage (and keeps int() cheap on fuzzed input).
_MAX_ID_DIGITS = 6
# Chip names like "Ascend950DT"; a bare "950" could be a memory figure.
_ASCEND_950 = re.compile(r"ascend\s*950|\b950[a-z]+\b")
_BOM = "\ufeff"
MAX_NPUS = 1024
"""Most logical NPUs (chip-map entries, topology rows) one host may list; real hosts have
at most a few dozen."""
MAX_AFFINITY_CPUS = 64 * MAX_CPUS_PER_LIST
"""Most CPU ids all topology affinity rows may expand to together (64 NPUs each affine to
8192 CPUs): bounds the memory a recorded topology can claim."""


def _small_int(token: str) -> int | None:
    token = token.strip()
    if token.isdigit() and token.isascii() and len(token) <= _MAX_ID_DIGITS:
        return int(token)
    return None


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _lines(text: str) -> list[str]:
    # A byte-order mark (U+FEFF, from an editor or a Windows copy) is not a column: left in,
    # it would shift the header's columns against the rows'.
    return text.replace(_BOM, "").splitlines()


def parse_chip_map(text: str) -> ChipMap:
    """Parse ``npu-smi info -m``.

    The header row (the first one naming ``NPU ID``) locates the columns ``NPU ID``, ``Chip ID``
    (optional, default 0) and ``Chip Logic ID`` (optional: Ascend 950 has none, so the logical
    id is the NPU id). Rows whose ids are not numeric (the ``-`` of MCU rows) are skipped.
    Contradictions raise ``ParseError`` naming both rows: one NPU/chip pair listed twice, or
    one logical id given to two chips; so do more than ``MAX_NPUS`` logical NPUs.
    """
    lines = _lines(text)
    header_at = next((i for i, line in enumerate(lines) if "npu id" in _norm(line)), None)
    if header_at is None:
        raise ParseError("npu-smi info -m: no header row with an 'NPU ID' column")
    columns = [_norm(c) for c in _COLUMN_SPLIT.split(lines[header_at].strip())]
    if "npu id" not in columns:
        raise ParseError(
            "npu-smi info -m: header columns must be separated by two or more spaces; "
            f"got {lines[header_at].strip()!r:.80}"
        )
    npu_col = columns.index("npu id")
    chip_col = columns.index("chip id") if "chip id" in columns else None
    logic_col = columns.index("chip logic id") if "chip logic id" in columns else None
    needed = max(c for c in (npu_col, chip_col, logic_col) if c is not None)
    result: ChipMap = {}
    pair_line: dict[tuple[int, int], int] = {}
    logic_line: dict[int, tuple[int, int, int]] = {}
    for number, line in enumerate(lines[header_at + 1 :], header_at + 2):
        tokens = line.split()
        if len(tokens) <= needed:
            continue
        npu = _small_int(tokens[npu_col])
        chip = 0 if chip_col is None else _small_int(tokens[chip_col])
        logic = npu if logic_col is None else _small_int(tokens[logic_col])
        if npu is None or chip is None or logic is None:
            continue
        if (npu, chip) in pair_line:
            raise ParseError(f"npu-smi info -m: NPU {npu} chip {chip} is listed twice "
                             f"(lines {pair_line[npu, chip]} and {number})")
        if logic in logic_line:
            other_npu, other_chip, other_at = logic_line[logic]
            raise ParseError(
                f"npu-smi info -m: logical NPU {logic} is given to two chips: NPU {other_npu} "
                f"chip {other_chip} (line {other_at}) and NPU {npu} chip {chip} (line {number})")
        if len(logic_line) == MAX_NPUS:
            raise ParseError(f"npu-smi info -m: lists more than {MAX_NPUS} logical NPUs "
                             f"(line {number}); at most {MAX_NPUS} are supported")
        pair_line[npu, chip] = number
        logic_line[logic] = (npu, chip, number)
        result.setdefault(npu, {})[chip] = logic
    return result


def logic_npus(chip_map: ChipMap) -> list[int]:
    """All logical NPU ids of a chip map, sorted."""
    return sorted({logic for chips in chip_map.values() for logic in chips.values()})


def check_info_text(text: str) -> None:
    """``npu-smi info`` output is its tables: a ``ParseError`` when it holds no row of them
    (a ``|`` row whose first cell starts with ``NPU``: the NPU table's or the process table's
    header), e.g. an empty output or noise, rather than "no process is running"."""
    if not text.strip():
        raise ParseError("npu-smi info: the output is empty (npu-smi printed nothing)")
    lines = [line.strip() for line in _lines(text) if line.strip()]
    for stripped in lines:
        if stripped.startswith("|") and _norm(stripped.split("|")[1]).startswith("npu"):
            return
    first = lines[0]
    raise ParseError("npu-smi info: not npu-smi's tables (no '| NPU ...' header row of the NPU "
                     f"or process table; first line {first!r:.60})")


def parse_running_npus(text: str, chip_map: ChipMap) -> list[int]:
    """Logical ids of NPUs with a running process in ``npu-smi info``'s process section.

    The section starts at a ``| NPU ... | Process id |`` header whose first cell is ``NPU Chip``
    (rows carry NPU and chip, A2/A3) or ``NPU ID`` (rows carry the NPU only). Separator rows,
    ``No running processes found`` rows and malformed rows are skipped. An NPU-only row whose
    NPU has several chips in ``chip_map`` is ambiguous and raises ``ParseError``.
    """
    lines = _lines(text)
    start = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("|") and "process id" in _norm(stripped):
            first = _norm(stripped.split("|")[1])  # the line starts with "|"
            if first.startswith("npu"):
                start = i
                with_chip = "chip" in first
                break
    if start is None:
        return []
    running: set[int] = set()
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if not stripped.startswith("|"):
            continue
        tokens = stripped.split("|")[1].split()  # the first cell
        npu = _small_int(tokens[0]) if tokens else None
        if npu is None:
            continue
        if with_chip:
            chip = _small_int(tokens[1]) if len(tokens) > 1 else None
            if chip is None:
                continue
            logic = chip_map.get(npu, {}).get(chip)
            if logic is None and not chip_map:
                logic = npu  # no chip map at all: one chip per NPU is the only reading
        else:
            chips = chip_map.get(npu, {})
            if len(chips) > 1:
                raise ParseError(
                    f"npu-smi info: process row names NPU {npu} without a chip, but NPU {npu} "
                    f"has {len(chips)} chips in npu-smi info -m; cannot tell which one runs it"
                )
            logic = next(iter(chips.values())) if chips else (npu if not chip_map else None)
        if logic is not None:
            running.add(logic)
    return sorted(running)


def parse_topo_affinity(text: str) -> dict[int, list[int]]:
    """CPU affinity per NPU from ``npu-smi info -t topo``.

    Rows start with ``NPU<n>``; the affinity is the token under the ``CPU Affinity`` header
    column when there is one, else the row's last token. Rows without a CPU list there (link-
    type-only matrices, legends) are ignored. Two rows giving one NPU an affinity, more than
    ``MAX_NPUS`` such rows, or more than ``MAX_AFFINITY_CPUS`` CPU ids in all rows together
    raise ``ParseError``.
    """
    affinity_at: int | None = None
    result: dict[int, list[int]] = {}
    row_at: dict[int, int] = {}
    total = 0
    for number, line in enumerate(_lines(text), 1):
        tokens = line.split()
        if not tokens:
            continue
        if "cpu affinity" in _norm(line) and _NPU_LABEL.match(tokens[0]):
            # Header: each matrix column is one token; rows carry one extra leading label.
            names = _norm(line).split()
            at = [i for i, name in enumerate(names[:-1]) if (name, names[i + 1]) == ("cpu",
                                                                                   "affinity")]
            affinity_at = at[0] + 1 if at else None
            continue
        label = _NPU_LABEL.match(tokens[0])
        if not label or len(tokens) < 2 or len(label.group(1)) > _MAX_ID_DIGITS:
            continue
        candidates = [tokens[-1]]
        if affinity_at is not None and affinity_at < len(tokens):
            candidates.insert(0, tokens[affinity_at])
        for value in candidates:
            if looks_like_cpu_list(value):
                try:
                    cpus = parse_cpu_list(value)
                except ParseError:
                    continue
                _add_affinity(result, row_at, int(label.group(1)), cpus, number)
                total += len(cpus)
                if total > MAX_AFFINITY_CPUS:
                    raise ParseError(
                        f"npu-smi info -t topo: the affinity rows name more than "
                        f"{MAX_AFFINITY_CPUS} CPU ids together (line {number}); refused")
                break
    return result


def _add_affinity(result: dict[int, list[int]], row_at: dict[int, int], npu: int,
                  cpus: list[int], number: int) -> None:
    if npu in row_at:
        raise ParseError(f"npu-smi info -t topo: NPU{npu} has two affinity rows "
                         f"(lines {row_at[npu]} and {number})")
    if len(row_at) == MAX_NPUS:
        raise ParseError(f"npu-smi info -t topo: more than {MAX_NPUS} NPU rows (line "
                         f"{number}); at most {MAX_NPUS} are supported")
    row_at[npu] = number
    result[npu] = cpus


def is_pci_address(text: str) -> bool:
    """True for a lower-case PCI address like ``0000:c1:00.0`` (safe as a path component)."""
    return _PCI_ADDRESS.fullmatch(text) is not None


def parse_board_pcie(text: str) -> str | None:
    """The PCIe address (lower case) from ``npu-smi info -t board``, or None if absent."""
    for line in text.splitlines():
        if "pcie bus info" in _norm(line):  # so the line has tokens
            value = line.split()[-1].lower()
            return value if is_pci_address(value) else None
    return None


SQ_IRQ = "sq_send_trigger_irq"
CQ_IRQ = "cq_update_irq"


def parse_npu_irqs(text: str) -> dict[int, str]:
    """IRQ number -> ``SQ_IRQ`` or ``CQ_IRQ`` for the ``/proc/interrupts`` lines naming one
    of the two NPU queue interrupts (lines naming both, or neither, are left out)."""
    irqs: dict[int, str] = {}
    for line in text.splitlines():
        names = [name for name in (SQ_IRQ, CQ_IRQ) if name in line]
        if len(names) != 1:
            continue
        irq = _small_int(line.partition(":")[0])
        if irq is not None:
            irqs[irq] = names[0]
    return irqs


def named_soc(chip_map_text: str, info_text: str, chip_map: ChipMap) -> str | None:
    """The SoC the npu-smi outputs name ("A5" for an Ascend 950, "310P", "A3" for a 910_93 or
    NPUs of several chips, "A2" for a 910B), None when they name none of them."""
    names = f"{chip_map_text}\n{info_text}".lower()
    if _ASCEND_950.search(names):
        return "A5"
    if "310p" in names:
        return "310P"
    if "910_93" in names or any(len(chips) > 1 for chips in chip_map.values()):
        return "A3"
    if "910b" in names:
        return "A2"
    return None


def detect_soc(chip_map_text: str, info_text: str, chip_map: ChipMap) -> str:
    """Guess the SoC string ("A2", "A3", "A5", "310P") from npu-smi outputs (A2 when they
    name none)."""
    return named_soc(chip_map_text, info_text, chip_map) or "A2"

from __future__ import annotations

from collections.abc import Callable

import pytest
from ascend_topology import (
    MAX_CPU_ID,
    ParseError,
)
from ascend_topology.facts import build_host_facts
from ascend_topology.npu_smi import (
    MAX_AFFINITY_CPUS,
    MAX_NPUS,
    detect_soc,
    is_pci_address,
    logic_npus,
    parse_board_pcie,
    parse_chip_map,
    parse_npu_irqs,
    parse_running_npus,
    parse_topo_affinity,
)
from hypothesis import example, given

from .fuzz_checks import result_or_error
from .fuzz_inputs import CHIP_MAPS, FUZZ, TEXTS

CHIP_MAP = """\
NPU ID  Chip ID  Chip Logic ID  Chip Name
0       0        0              Ascend
0       1        -              Mcu
1       0        1              Ascend
"""

PROCESSES = """\
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+==========================+=========================+
| 0       0                 | 3428811       | python3.10               | 56600                   |
| 1       0                 | 3428818       | python3.10               | 56474                   |
| No running processes found in NPU 3                                                            |
"""

TOPO = """\
        NPU0    NPU1    NPU2    CPU Affinity
NPU0    X       HCCS    HCCS    144-167
NPU1    HCCS    X       HCCS    0-23
NPU2    HCCS    HCCS    X       144-167
"""


def test_chip_map_reference_example() -> None:
    chip_map = parse_chip_map(CHIP_MAP)
    assert chip_map == {0: {0: 0}, 1: {0: 1}}
    assert logic_npus(chip_map) == [0, 1]


def test_chip_map_with_phy_id_and_leading_spaces() -> None:
    text = (
        "\n        NPU ID    Chip ID    Chip Logic ID    Chip Phy-ID    Chip Name\n"
        "        0         0          0                0              Ascend 910\n"
        "        0         1          1                1              Ascend 910\n"
        "        0         2          -                -              Mcu\n"
    )
    assert parse_chip_map(text) == {0: {0: 0, 1: 1}}


def test_chip_map_ascend_950_style_has_no_logic_id() -> None:
    text = "NPU ID  Slot ID  Chip ID  Chip Phy-ID  Chip Name\n2  2  0  2  Ascend950DT\n"
    assert parse_chip_map(text) == {2: {0: 2}}


def test_chip_map_without_header_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="NPU ID"):
        parse_chip_map("0 0 0 Ascend\n")


def test_chip_map_header_with_single_spaces_is_explained() -> None:
    with pytest.raises(ParseError, match="two or more spaces"):
        parse_chip_map("NPU ID Chip ID Chip Logic ID\n0 0 0\n")


def test_running_npus_reference_example() -> None:
    assert parse_running_npus(PROCESSES, {0: {0: 0}, 1: {0: 1}, 3: {0: 3}}) == [0, 1]


def test_running_npus_maps_chips_to_logic_ids_on_a3() -> None:
    text = PROCESSES.replace("| 1       0 ", "| 0       1 ")
    assert parse_running_npus(text, {0: {0: 0, 1: 1}}) == [0, 1]


def test_running_npus_npu_only_table() -> None:
    text = (
        "| NPU ID     | Process id    | Process name | Process memory(MB) |\n"
        "+============+===============+==============+====================+\n"
        "|   2        | 77            | python3      | 100                |\n"
        "| bogus      | 78            | python3      | 100                |\n"
    )
    assert parse_running_npus(text, {2: {0: 2}}) == [2]


def test_running_npus_npu_only_row_with_two_chips_is_ambiguous() -> None:
    text = "| NPU ID | Process id | Process name |\n| 0 | 5 | python |\n"
    with pytest.raises(ParseError, match="2 chips"):
        parse_running_npus(text, {0: {0: 0, 1: 1}})


def test_running_npus_skips_malformed_rows_and_extra_spaces() -> None:
    text = (
        "+---+\n|   NPU    Chip   |  Process id | name |\n"
        "|  0   x | 1 | p |\n|1| 2 | p |\n|   1     0    |  3 | p |\n| | |\nnot a row\n"
    )
    assert parse_running_npus(text, {0: {0: 0}, 1: {0: 5}}) == [5]


def test_running_npus_without_process_section_is_empty() -> None:
    assert parse_running_npus("| NPU  Name | Health |\n| 0 910B | OK |\n", {0: {0: 0}}) == []


def test_topo_reference_example() -> None:
    result = parse_topo_affinity(TOPO)
    assert result == {0: list(range(144, 168)), 1: list(range(24)), 2: list(range(144, 168))}


def test_topo_link_only_matrix_and_legend_are_ignored() -> None:
    text = "        NPU0  NPU1\nNPU0    X     HCCS\nNPU1    HCCS  X\n\nLegend:\n  X = Self\n"
    assert parse_topo_affinity(text) == {}


def test_topo_uses_cpu_affinity_column_when_more_columns_follow() -> None:
    text = (
        "        NPU0    NPU1    CPU Affinity    NUMA Affinity\n"
        "NPU0    X       HCCS    0-23,48-71      0\n"
        "NPU1    HCCS    X       24-47           1\n"
    )
    assert parse_topo_affinity(text) == {0: [*range(24), *range(48, 72)], 1: list(range(24, 48))}


def test_board_pcie_is_lower_cased() -> None:
    text = "Board ID : 0x02\nPCIe Bus Info                  : 0000:C1:00.0\nSlot ID : 0\n"
    assert parse_board_pcie(text) == "0000:c1:00.0"
    assert parse_board_pcie("PCIe Bus Info : N/A\n") is None
    assert parse_board_pcie("nothing") is None


def test_npu_irqs_from_proc_interrupts() -> None:
    text = (
        "           CPU0       CPU1\n"
        " 120:          0          0   ITS-MSI 1 Edge      sq_send_trigger_irq\n"
        " 121:          0          0   ITS-MSI 2 Edge      cq_update_irq\n"
        " 122:          0          0   ITS-MSI 3 Edge      eth0-rx\n"
        " 300:          0          0   ITS-MSI 9 Edge      sq_send_trigger_irq\n"
        " 301:          0          0   ITS-MSI 9 Edge      sq_send_trigger_irq cq_update_irq\n"
        " 302:          0          0   IR-PCI-MSI 0000:c1:00.0 Edge  cq_update_irq\n"
        " NMI:          0          0   Non-maskable interrupts sq_send_trigger_irq\n"
    )
    # A line naming both queue interrupts is ambiguous and attributed to neither.
    assert parse_npu_irqs(text) == {120: "sq_send_trigger_irq", 121: "cq_update_irq",
                                    300: "sq_send_trigger_irq", 302: "cq_update_irq"}


@pytest.mark.parametrize(
    ("chip_map_text", "info_text", "chip_map", "soc"),
    [
        ("Ascend950DT", "", {0: {0: 0}}, "A5"),
        ("Ascend 310P3", "", {0: {0: 0, 1: 1}}, "310P"),
        ("Ascend 910", "", {0: {0: 0, 1: 1}}, "A3"),
        ("Ascend 910B3", "| 0 910B3 | OK | 950 MB", {0: {0: 0}}, "A2"),
    ],
)
def test_detect_soc(chip_map_text: str, info_text: str, chip_map: dict[int, dict[int, int]],
                    soc: str) -> None:
    assert detect_soc(chip_map_text, info_text, chip_map) == soc


@pytest.mark.parametrize(("text", "expected"), [
    # No header: the row's last token is the affinity.
    ("NPU0  X  HCCS  0-3\nNPU1  HCCS  X  4-7\n", {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}),
    # A blank line and a lone label before the rows; a two-token row is enough.
    ("\nNPU0\nNPU3  0-1\n", {3: [0, 1]}),
    # Label ids: six digits are read, seven are garbage (and skipped, not the end).
    ("NPU1234567  0-1\nNPU123456  2-3\n", {123456: [2, 3]}),
    # One NPU column, then CPU Affinity and NUMA Affinity: the header's position is used.
    ("        NPU0    CPU Affinity    NUMA Affinity\nNPU0    X       0-2     0\n",
     {0: [0, 1, 2]}),
    # A trailing token after the affinity column does not hide it.
    ("    NPU0  NPU1  CPU Affinity\nNPU0  X  HCCS  0-3  extra\n", {0: [0, 1, 2, 3]}),
    # A row shorter than the header: its last token is used.
    ("    NPU0  NPU1  CPU Affinity\nNPU0  X  0-3\n", {0: [0, 1, 2, 3]}),
    # "cpu affinity" inside a longer word is no column name.
    ("    NPU0  XCPU Affinity\nNPU0  X  0-3\n", {0: [0, 1, 2, 3]}),
    # The column's value is out of range: the last token is tried next.
    ("  NPU0  CPU Affinity  Spare\nNPU0  X  0-9999  4-5\n", {0: [4, 5]}),
])
def test_topo_rows(text: str, expected: dict[int, list[int]]) -> None:
    assert parse_topo_affinity(text) == expected


def test_running_npus_bad_rows_do_not_end_the_table() -> None:
    text = "| NPU  Chip | Process id |\n| | |\n| x 0 | 1 |\n| 2  0 | 1 |\n"
    assert parse_running_npus(text, {2: {0: 7}}) == [7]


def test_chip_map_bad_rows_do_not_end_the_table() -> None:
    text = "NPU ID  Chip ID  Chip Logic ID\n0  0  -\n1234567  0  1\n3  0\n2  0  9\n"
    assert parse_chip_map(text) == {2: {0: 9}}
    assert parse_chip_map("NPU ID  Chip ID\n123456  0\n") == {123456: {0: 123456}}


# --- contradictions, a byte-order mark and size bounds -------------------------------------

def test_chip_map_after_a_byte_order_mark_keeps_every_npu() -> None:
    # The BOM would otherwise be a header column of its own and shift every column by one.
    text = "\ufeff        NPU ID  Chip ID  Chip Logic ID\n" + "".join(
        f"        {n}       0        {n}\n" for n in range(8))
    assert parse_chip_map(text) == {n: {0: n} for n in range(8)}


def test_chip_map_pair_listed_twice_is_an_error_naming_both_lines() -> None:
    with pytest.raises(ParseError, match=r"^npu-smi info -m: NPU 1 chip 0 is listed twice "
                                         r"\(lines 4 and 5\)$"):
        parse_chip_map(CHIP_MAP + "1       0        1              Ascend\n")


def test_chip_map_logic_id_given_to_two_chips_is_an_error_naming_both() -> None:
    with pytest.raises(ParseError, match=r"^npu-smi info -m: logical NPU 1 is given to two "
                                         r"chips: NPU 1 chip 0 \(line 4\) and NPU 2 chip 0 "
                                         r"\(line 5\)$"):
        parse_chip_map(CHIP_MAP + "2       0        1              Ascend\n")


def test_chip_map_npu_count_is_bounded_at_max_npus() -> None:
    header = "NPU ID  Chip ID  Chip Logic ID\n"
    rows = [f"{n}  0  {n}\n" for n in range(MAX_NPUS + 1)]
    assert len(parse_chip_map(header + "".join(rows[:MAX_NPUS]))) == MAX_NPUS
    with pytest.raises(ParseError, match=f"lists more than {MAX_NPUS} logical NPUs "
                                         f"\\(line {MAX_NPUS + 2}\\)"):
        parse_chip_map(header + "".join(rows))


def test_topo_row_repeated_for_one_npu_is_an_error_naming_both_lines() -> None:
    with pytest.raises(ParseError, match=r"^npu-smi info -t topo: NPU1 has two affinity rows "
                                         r"\(lines 3 and 5\)$"):
        parse_topo_affinity(TOPO + "NPU1    HCCS    X       HCCS    144-167\n")


def test_topo_after_a_byte_order_mark_keeps_the_affinity_column() -> None:
    assert parse_topo_affinity("\ufeff" + TOPO)[1] == list(range(24))


def test_topo_rows_are_bounded_in_count_and_in_expanded_cpus() -> None:
    full = f"0-{MAX_CPU_ID}"
    per_row = MAX_CPU_ID + 1
    rows_within = MAX_AFFINITY_CPUS // per_row  # 64 rows of 8192 CPUs: exactly the bound
    within = "".join(f"NPU{n} X {full}\n" for n in range(rows_within))
    assert sum(map(len, parse_topo_affinity(within).values())) == MAX_AFFINITY_CPUS
    with pytest.raises(ParseError, match=f"name more than {MAX_AFFINITY_CPUS} CPU ids "
                                         f"together \\(line {rows_within + 1}\\)"):
        parse_topo_affinity(within + f"NPU{rows_within} X 0\n")
    small = "".join(f"NPU{n} X 0\n" for n in range(MAX_NPUS))
    assert len(parse_topo_affinity(small)) == MAX_NPUS
    with pytest.raises(ParseError, match=f"more than {MAX_NPUS} NPU rows"):
        parse_topo_affinity(small + f"NPU{MAX_NPUS} X 0\n")




@pytest.mark.slow
@FUZZ
@given(TEXTS, CHIP_MAPS)
@example("NPU ID  Chip ID\n\u00b2 0\n| NPU ID | Process id |\n| \u00b2 | 1 |", {})
def test_npu_smi_parsers(text: str, chip_map: dict[int, dict[int, int]]) -> None:
    parsed = result_or_error(lambda: parse_chip_map(text))
    for npu, chips in (parsed or {}).items():
        assert npu >= 0 and all(c >= 0 and logic >= 0 for c, logic in chips.items())
    running = result_or_error(lambda: parse_running_npus(text, chip_map))
    if running is not None:
        assert running == sorted(set(running))
        # Running NPUs are logical ids of the chip map (or, without a map, NPU ids).
        assert not chip_map or set(running) <= set(logic_npus(chip_map))
    for npu, cpus in (result_or_error(lambda: parse_topo_affinity(text)) or {}).items():
        assert npu >= 0 and cpus == sorted(set(cpus))
        assert all(0 <= c <= MAX_CPU_ID for c in cpus)
    address = parse_board_pcie(text)
    assert address is None or is_pci_address(address)
    for irq, name in parse_npu_irqs(text).items():
        assert irq >= 0 and name in ("sq_send_trigger_irq", "cq_update_irq") and name in text


def _message(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


def test_chip_map_errors() -> None:
    assert _message(ParseError, lambda: parse_chip_map("0 0 0 Ascend\n")) == (
        "npu-smi info -m: no header row with an 'NPU ID' column")
    assert _message(ParseError, lambda: parse_chip_map("NPU ID Chip ID\n0 0\n")) == (
        "npu-smi info -m: header columns must be separated by two or more spaces; got "
        "'NPU ID Chip ID'")


def test_chip_map_columns_found_by_name() -> None:
    # Chip Logic ID before NPU ID; ids with 7 digits are garbage; short rows are skipped.
    text = ("Chip Logic ID  Chip ID  NPU ID\n"
            "5  0  1\n6  1  1\n1234567  0  2\n7  0  1234567\n3  0\n")
    assert parse_chip_map(text) == {1: {0: 5, 1: 6}}
    # Without a Chip ID column every row is chip 0.
    assert parse_chip_map("NPU ID  Chip Logic ID\n4  9\n") == {4: {0: 9}}
    # Header words may be split by tabs; the first header wins.
    assert parse_chip_map("x\nNPU ID\tChip ID\n3\t0\nNPU ID  Chip ID\n") == {3: {0: 3}}


def test_running_npus_errors_and_fallbacks() -> None:
    text = "| NPU ID | Process id |\n| 4 | 1 |\n"
    assert _message(ParseError, lambda: parse_running_npus(text, {4: {0: 8, 1: 9}})) == (
        "npu-smi info: process row names NPU 4 without a chip, but NPU 4 has 2 chips in "
        "npu-smi info -m; cannot tell which one runs it")
    assert parse_running_npus(text, {}) == [4]  # no chip map: the NPU id is the only reading
    assert parse_running_npus(text, {5: {0: 5}}) == []  # an NPU the map does not know
    with_chip = "| NPU  Chip | Process id |\n| 4  1 | 1 |\n| 6 | 2 |\n"
    assert parse_running_npus(with_chip, {}) == [4]
    assert parse_running_npus(with_chip, {4: {0: 8}}) == []


def test_running_npus_header_must_start_with_npu() -> None:
    text = "| Name | Process id |\n| 4 | 1 |\n| NPU ID | Process id |\n| 2 | 1 |\n"
    assert parse_running_npus(text, {2: {0: 2}, 4: {0: 4}}) == [2]


@pytest.mark.parametrize(("chip_map_text", "info", "chips", "soc"), [
    ("x 950PR y", "", {0: {0: 0}}, "A5"),
    ("", "Ascend 950", {0: {0: 0}}, "A5"),
    ("950 MB", "", {0: {0: 0}}, "A2"),
    ("", "310P3", {0: {0: 0}}, "310P"),
    ("Ascend910_9391", "", {0: {0: 0}}, "A3"),
    ("", "", {0: {0: 0}, 1: {0: 1}}, "A2"),
    ("", "", {0: {0: 0, 1: 1}}, "A3"),
])
def test_detect_soc_cases(chip_map_text: str, info: str, chips: dict[int, dict[int, int]],
                          soc: str) -> None:
    assert detect_soc(chip_map_text, info, chips) == soc


@pytest.mark.parametrize(("chip_map_text", "info_text", "soc"), [
    ("NPU ID  Chip ID\n0  0  Ascend310P3\n", None, "310P"),
    ("NPU ID  Chip ID\n0  0\n", "| NPU  Name | Health |\n| 0  310P3 | OK |", "310P"),
    ("NPU ID  Chip ID\n0  0\n", None, "A2"),
])
def test_soc_detected_from_both_outputs(chip_map_text: str, info_text: str | None,
                                        soc: str) -> None:
    facts = build_host_facts(chip_map_text=chip_map_text, info_text=info_text, topo_text="",
                             numa={0: [0]}, allowed_cpus=[0])
    assert facts.soc == soc
    assert build_host_facts(chip_map_text=chip_map_text, info_text=info_text, topo_text="",
                            numa={0: [0]}, allowed_cpus=[0], soc="A3").soc == "A3"

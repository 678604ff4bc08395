"""The doctor's recorded facts and its ELF reader against independent sources: the torch-npu
wheel record (``torch_npu_double.record``), real shared libraries of this environment, and a library
built by the system C compiler."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from torch_npu_double.record import record_path
from vllm_ascend.doctor.elf_symbols import ElfError, read_elf_dynamic
from vllm_ascend.doctor.kernel_entry_points import (
    ACLNN,
    ASCEND_OPS,
    TORCH_NPU_NEEDED,
    TORCH_NPU_VERSION,
)

RECORD = record_path(TORCH_NPU_VERSION)


def test_entry_point_table_is_the_one_recorded_from_the_wheel() -> None:
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert {k: tuple(v) for k, v in record["aclnn"].items()} == ACLNN
    # the CANN libraries among libtorch_npu.so's NEEDED entries (not torch's, not the
    # wheel's own, not the C/C++ runtime)
    own = ("libtorch", "libc10", "libtensorpipe", "libnpu_profiler")
    system = ("libstdc++", "libm.", "libgcc_s", "libc.", "ld-linux")
    cann = tuple(n for n in record["libtorch_npu_needed"]
                 if not n.startswith(own) and not n.startswith(system))
    assert cann == TORCH_NPU_NEEDED


def test_every_kernel_of_an_ascend_op_has_its_entry_points_and_the_op_exists() -> None:
    from ascend_kernels.ops import OP_NAMES

    for op, (kernels, feature) in ASCEND_OPS.items():
        assert op in OP_NAMES and feature
        assert all(kernel in ACLNN for kernel in kernels)


def test_reader_on_real_libraries_of_this_environment() -> None:
    import torch

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    found = read_elf_dynamic(lib)
    assert "libc10.so" in found.needed
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        libc = Path("/lib/aarch64-linux-gnu/libc.so.6")
    exported = read_elf_dynamic(libc).exported
    assert {"malloc", "free", "printf"} <= exported


def test_reader_on_a_library_built_by_the_system_compiler(tmp_path: Path) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on this host (the other tests use hand-built ELF files)")
    source = tmp_path / "ops.c"
    source.write_text("extern int aclCreateTensor(void);\n"
                      "int aclnnRmsNorm(void) { return aclCreateTensor(); }\n"
                      "static int aclnnHidden(void) { return 1; }\n"
                      "int use_hidden(void) { return aclnnHidden(); }\n")
    out = tmp_path / "libopapi.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(source), "-lm"], check=True)
    found = read_elf_dynamic(out)
    assert {"aclnnRmsNorm", "use_hidden"} <= found.exported
    assert "aclCreateTensor" not in found.exported  # referenced, not defined
    assert "aclnnHidden" not in found.exported  # static: not a dynamic symbol


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"\x7fELF\x03\x01" + bytes(58),
                                  b"MZ" + bytes(100)])
def test_reader_refuses_what_is_not_an_elf_library(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(data)
    with pytest.raises(ElfError):
        read_elf_dynamic(path)


def test_reader_refuses_tables_outside_the_file(tmp_path: Path) -> None:
    from .doctor_trees import write_elf

    path = write_elf(tmp_path / "lib.so", ["aclnnAdd"])
    data = bytearray(path.read_bytes())
    data[40:48] = (len(data) + 4096).to_bytes(8, "little")  # e_shoff past the end
    path.write_bytes(bytes(data))
    with pytest.raises(ElfError, match="outside the file"):
        read_elf_dynamic(path)


def test_reader_refuses_special_files() -> None:
    with pytest.raises(ElfError, match="not a regular file"):
        read_elf_dynamic("/dev/null")

"""Recorded host trees for the doctor's tests: minimal ELF shared libraries exporting chosen
symbols, fake CANN / NNAL installs, /proc files, fake distributions (``*.dist-info``)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

from vllm_ascend.doctor.kernel_entry_points import ACLNN, TORCH_NPU_NEEDED

ALL_ACLNN = sorted({name for names in ACLNN.values() for name in names})
TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"
ATB_LIB = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib"


def write_elf(path: Path, exported: Sequence[str], needed: Sequence[str] = (),
              undefined: Sequence[str] = ()) -> Path:
    """An ELF64 little-endian shared object whose .dynsym defines ``exported`` (global
    functions), references ``undefined`` (section index 0) and whose .dynamic NEEDs
    ``needed``: the sections a loader and ``readelf --dyn-syms`` read, nothing else."""
    strtab = b"\0"
    offsets: dict[str, int] = {}
    for name in [*exported, *undefined, *needed]:
        offsets[name] = len(strtab)
        strtab += name.encode() + b"\0"
    symtab = bytes(24)  # the null symbol
    for name in exported:
        symtab += struct.pack("<IBBHQQ", offsets[name], (1 << 4) | 2, 0, 1, 0, 0)
    for name in undefined:
        symtab += struct.pack("<IBBHQQ", offsets[name], (1 << 4) | 2, 0, 0, 0, 0)
    dynamic = b"".join(struct.pack("<qQ", 1, offsets[n]) for n in needed) + struct.pack("<qQ", 0, 0)
    shstr = b"\0.dynstr\0.dynsym\0.dynamic\0.shstrtab\0"
    bodies = [strtab, symtab, dynamic, shstr]
    offset = 64
    placed = []
    for body in bodies:
        placed.append(offset)
        offset += len(body)
    shoff = offset

    def sh(name: int, kind: int, off: int, size: int, link: int, entsize: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, off, size, link, 0, 1, entsize)

    sections = (bytes(64)
                + sh(1, 3, placed[0], len(strtab), 0, 0)          # .dynstr
                + sh(9, 11, placed[1], len(symtab), 1, 24)        # .dynsym -> .dynstr
                + sh(17, 6, placed[2], len(dynamic), 1, 16)       # .dynamic -> .dynstr
                + sh(26, 3, placed[3], len(shstr), 0, 0))         # .shstrtab
    header = (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
              + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 5, 4))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + b"".join(bodies) + sections)
    return path


def under(root: Path, host_path: str) -> Path:
    return root / host_path.lstrip("/")


def cann_tree(root: Path, *, version: str | None = "9.1.0", exported: Sequence[str] | None = None,
              libraries: tuple[str, ...] = TORCH_NPU_NEEDED, nnal: bool = True) -> None:
    """A CANN toolkit ``ascend-toolkit/<version>`` with ``latest`` pointing at it, its install
    record (when ``version``), ``lib64/libopapi.so`` exporting ``exported`` (default: every
    entry point the plugin calls) and the ``libraries`` torch-npu links against; NNAL's ATB."""
    base = under(root, "/usr/local/Ascend/ascend-toolkit")
    real = base / (version or "unknown")
    (real / "lib64").mkdir(parents=True)
    (base / "latest").symlink_to(real.name)
    (base / "set_env.sh").write_text("# CANN environment\n")
    (real / "opp").mkdir()
    if version is not None:
        (real / "x86_64-linux").mkdir()
        (real / "x86_64-linux" / "ascend_toolkit_install.info").write_text(
            f"package_name=Ascend-cann-toolkit\nversion={version}\narch=x86_64\n")
    write_elf(real / "lib64" / "libopapi.so", ALL_ACLNN if exported is None else exported,
              needed=["libc.so.6"], undefined=["aclCreateTensor"])
    for name in libraries:
        write_elf(real / "lib64" / name, [name.split(".")[0] + "_init"])
    if nnal:
        atb = under(root, ATB_LIB)
        atb.mkdir(parents=True)
        write_elf(atb / "libatb.so", ["atb_init"])
        (under(root, "/usr/local/Ascend/nnal/atb") / "set_env.sh").write_text("# ATB\n")


def sourced_env(*, nnal: bool = True) -> dict[str, str]:
    """The variables CANN's (and NNAL's) set_env.sh set, as the host names the paths."""
    env = {"ASCEND_TOOLKIT_HOME": TOOLKIT, "ASCEND_HOME_PATH": TOOLKIT,
           "ASCEND_OPP_PATH": f"{TOOLKIT}/opp", "LD_LIBRARY_PATH": f"{TOOLKIT}/lib64"}
    if nnal:
        env["ATB_HOME_PATH"] = "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1"
        env["LD_LIBRARY_PATH"] += f":{ATB_LIB}"
    return env


def proc_files(root: Path, *, available_kb: int = 16 << 20, thp: str = "madvise") -> None:
    """``/proc/meminfo`` (16 GiB available by default) and the THP mode file."""
    meminfo = under(root, "/proc/meminfo")
    meminfo.parent.mkdir(parents=True, exist_ok=True)
    meminfo.write_text(f"MemTotal:       {32 << 20} kB\nMemAvailable:   {available_kb} kB\n"
                       "HugePages_Total:       0\nHugePages_Free:        0\n"
                       "Hugepagesize:       2048 kB\n")
    thp_file = under(root, "/sys/kernel/mm/transparent_hugepage/enabled")
    thp_file.parent.mkdir(parents=True, exist_ok=True)
    modes = ["always", "madvise", "never"]
    thp_file.write_text(" ".join(f"[{m}]" if m == thp else m for m in modes) + "\n")


def fake_dist(site: Path, name: str, version: str, requires: Sequence[str] = (),
              requires_python: str | None = None) -> None:
    """A ``<name>-<version>.dist-info`` that importlib.metadata finds before the real one."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")

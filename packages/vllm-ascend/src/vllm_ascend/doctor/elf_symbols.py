"""The dynamic symbols and NEEDED entries of an ELF shared library, read in pure Python."""
# Seeks to the few sections it needs: CANN's operator libraries are hundreds of MiB.

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

SHT_DYNSYM = 11
SHT_DYNAMIC = 6
DT_NEEDED = 1
SHN_UNDEF = 0
STB_GLOBAL, STB_WEAK = 1, 2
# A dynamic symbol or string table larger than this is not a library we should read.
MAX_SECTION_BYTES = 256 << 20
MAX_SECTIONS = 1 << 16


class ElfError(ValueError):
    """The file is not a readable ELF shared library."""


@dataclass(frozen=True)
class ElfDynamic:
    """What a shared library exports (defined global or weak dynamic symbols) and needs."""

    exported: frozenset[str]
    needed: tuple[str, ...]


def _read_at(handle: BinaryIO, offset: int, size: int, file_size: int, what: str) -> bytes:
    if size < 0 or size > MAX_SECTION_BYTES or offset < 0 or offset + size > file_size:
        raise ElfError(f"{what} lies outside the file ({offset}+{size} of {file_size} bytes)")
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise ElfError(f"{what} is truncated")
    return data


def _string(table: bytes, offset: int) -> str:
    if not 0 <= offset < len(table):
        return ""
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def read_elf_dynamic(path: str | os.PathLike[str]) -> ElfDynamic:
    """Exported dynamic symbols and NEEDED libraries of ``path``; ``ElfError`` or ``OSError``."""
    # O_NONBLOCK: a FIFO named like a library must not block the open; it is refused below.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ElfError(f"{path} is not a regular file")
        size = info.st_size
        ident = handle.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            raise ElfError(f"{path} is not an ELF file")
        wide = {1: False, 2: True}.get(ident[4])
        order = {1: "<", 2: ">"}.get(ident[5])
        if wide is None or order is None:
            raise ElfError(f"{path}: unknown ELF class or byte order")
        if wide:
            header = _read_at(handle, 16, 48, size, "ELF header")
            shoff, = struct.unpack_from(order + "Q", header, 24)
            shentsize, shnum = struct.unpack_from(order + "HH", header, 42)
            sh_fmt, sym_fmt, dyn_fmt = order + "IIQQQQIIQQ", order + "IBBHQQ", order + "qQ"
        else:
            header = _read_at(handle, 16, 36, size, "ELF header")
            shoff, = struct.unpack_from(order + "I", header, 16)
            shentsize, shnum = struct.unpack_from(order + "HH", header, 30)
            sh_fmt, sym_fmt, dyn_fmt = order + "IIIIIIIIII", order + "IIIBBH", order + "iI"
        if shnum > MAX_SECTIONS or shentsize < struct.calcsize(sh_fmt):
            raise ElfError(f"{path}: implausible section header table")
        table = _read_at(handle, shoff, shentsize * shnum, size, "section headers")
        sections = [struct.unpack_from(sh_fmt, table, i * shentsize) for i in range(shnum)]
        # The format allows one dynamic symbol table and one dynamic section (the ELF gABI,
        # "Sections"); only the first of each is read, so the work is linear in the headers.
        dynsym = next((i for i, sec in enumerate(sections) if sec[1] == SHT_DYNSYM), None)
        dynamic = next((i for i, sec in enumerate(sections) if sec[1] == SHT_DYNAMIC), None)

        def body(index: int, what: str) -> bytes:
            if not 0 <= index < len(sections):
                raise ElfError(f"{path}: {what} links to a missing section")
            sec = sections[index]
            return _read_at(handle, sec[4], sec[5], size, what)

        exported: set[str] = set()
        needed: list[str] = []
        if dynsym is not None:
            symbols, strings = body(dynsym, "dynsym"), body(sections[dynsym][6], "dynstr")
            step = struct.calcsize(sym_fmt)
            for offset in range(0, len(symbols) - step + 1, step):
                fields = struct.unpack_from(sym_fmt, symbols, offset)
                if wide:
                    name, info_byte, shndx = fields[0], fields[1], fields[3]
                else:
                    name, info_byte, shndx = fields[0], fields[3], fields[5]
                if shndx != SHN_UNDEF and info_byte >> 4 in (STB_GLOBAL, STB_WEAK):
                    text = _string(strings, name)
                    if text:
                        exported.add(text)
        if dynamic is not None:
            entries, strings = body(dynamic, "dynamic"), body(sections[dynamic][6], "dynstr")
            step = struct.calcsize(dyn_fmt)
            for offset in range(0, len(entries) - step + 1, step):
                tag, value = struct.unpack_from(dyn_fmt, entries, offset)
                if tag == DT_NEEDED:
                    needed.append(_string(strings, value))
                elif tag == 0:
                    break
    return ElfDynamic(frozenset(exported), tuple(needed))


def exported_symbols(paths: Sequence[str | os.PathLike[str]]) -> frozenset[str]:
    """The union of what ``paths`` export (recent CANN splits the operator API over libraries)."""
    names: set[str] = set()
    for path in paths:
        names |= read_elf_dynamic(path).exported
    return frozenset(names)

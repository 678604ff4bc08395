"""One-pass CPU loops in C for the reference ops that plain torch cannot do in one pass.

torch has no single kernel for ``bf16(float(x) * s + float(y))`` with ``s`` kept in float32
(``torch.add(y, x, alpha=s)`` rounds ``s`` to bfloat16 first), and its chunked float32 route
costs more than the unfused pair on the benchmark CPU. The C sources ship in the wheel under
``ascend_kernels/native/`` and are compiled with the system C compiler on first use, one
library per source, keyed by source, flags, compiler and machine.

Adding a loop: drop ``native/<name>.c`` defining an exported function and declare it once with
:class:`NativeKernel` (source file, symbol, ctypes signature) next to the code that calls it;
``default_loops().function(DECLARATION)`` then returns the callable, or ``None`` when it is
unavailable (no compiler, build failure, symbol missing), in which case the caller uses its
torch path.

Where libraries are kept and why they can be trusted (see :mod:`ascend_kernels.native_cache`):
the cache directory (``$XDG_CACHE_HOME/ascend_kernels``, default ``~/.cache/ascend_kernels``)
is used only if this user owns it, nobody else can write it or the directories above it, and
it is not a symlink; otherwise one warning is logged and the libraries are built in a fresh
private temporary directory that is deleted once they are loaded. A library is loaded only if
its sha256 matches the record this user wrote when building it; a foreign, damaged or
unrecorded file is rebuilt, never fatal.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascend_kernels.native_cache import (
    UntrustedFile,
    directory_problem,
    make_private_directory,
    sha256_hex,
    verify_against_record,
    write_atomic,
)

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("ascend_kernels.native_loops")

# -ffp-contract=off: no fused multiply-add, so the product rounds to float32 like torch's mul.
CFLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math")
_BUILD_ERRORS = (OSError, subprocess.SubprocessError, UnicodeError)


@dataclass(frozen=True)
class NativeKernel:
    """One exported C function: its source under ``ascend_kernels/native/`` and C signature."""

    source: str
    symbol: str
    argtypes: tuple[Any, ...]
    restype: Any = None


MULS_ADD_BF16 = NativeKernel(
    source="muls_add_bf16.c",
    symbol="ascend_muls_add_bf16",
    argtypes=(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float),
)
SOURCE = MULS_ADD_BF16.source  # kept for callers of the single-source version

MulsAddLoop = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", float], None]


def cache_root() -> Path:
    """Where compiled loops are kept: ``$XDG_CACHE_HOME/ascend_kernels`` or ``~/.cache/...``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend_kernels"


class NativeLoops:
    """The compiled C loops of one cache directory, each built and loaded on first use."""

    def __init__(self, directory: Path, compiler: str | None = None) -> None:
        self.directory = directory
        self.compiler = compiler if compiler is not None else _find_compiler()
        self._libraries: dict[str, ctypes.CDLL | None] = {}
        self._functions: dict[NativeKernel, Any] = {}
        self._muls_add: MulsAddLoop | None = None
        self._usable_directory: Path | None = None
        self._directory_checked = False

    def library(self, source: str = SOURCE) -> ctypes.CDLL | None:
        """The loaded library of ``source``, built if needed; ``None`` if unavailable."""
        if source not in self._libraries:
            try:
                self._libraries[source] = self._load(source)
            except (*_BUILD_ERRORS, RuntimeError, UntrustedFile) as exc:
                self._libraries[source] = None
                logger.info("one-pass C loops of %s unavailable, using torch paths: %s",
                            source, exc)
        return self._libraries[source]

    def function(self, kernel: NativeKernel) -> Any:
        """The ctypes function declared by ``kernel``, or ``None`` if it is unavailable."""
        if kernel not in self._functions:
            lib = self.library(kernel.source)
            fn = None
            if lib is not None:
                try:
                    fn = lib[kernel.symbol]
                except AttributeError:
                    logger.info("%s has no symbol %s; using torch paths", kernel.source,
                                kernel.symbol)
                else:
                    fn.restype = kernel.restype
                    fn.argtypes = list(kernel.argtypes)
            self._functions[kernel] = fn
        return self._functions[kernel]

    def muls_add_bf16(self) -> MulsAddLoop | None:
        """``loop(x, y, out, scale)`` over contiguous CPU bfloat16 tensors, or ``None``."""
        if self._muls_add is None:
            fn = self.function(MULS_ADD_BF16)
            if fn is None:
                return None

            def loop(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, scale: float) -> None:
                fn(x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel(), scale)

            self._muls_add = loop
        return self._muls_add

    def library_path(self, source: str) -> Path:
        """Where the cache directory keeps the library built from ``source``."""
        return self.directory / self._library_name(source)

    def _library_name(self, source: str) -> str:
        if self.compiler is None:
            raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
        key = sha256_hex(
            b"\0".join([_source_bytes(source), " ".join(CFLAGS).encode(),
                        _compiler_id(self.compiler), platform.machine().encode()])
        )[:16]
        return f"{Path(source).stem}-{key}.so"

    def _load(self, source: str) -> ctypes.CDLL:
        name = self._library_name(source)
        directory = self._cache_directory()
        if directory is not None:
            return self._load_or_build(directory, source, name)
        # The cache is refused: build in a private directory only this process knows, load,
        # and delete it (the loaded library stays mapped).
        private = Path(tempfile.mkdtemp(prefix="ascend_kernels-"))
        try:
            problem = directory_problem(private, os.geteuid())
            if problem is not None:
                raise RuntimeError(f"no trusted directory to build in: {problem}")
            return self._load_or_build(private, source, name)
        finally:
            shutil.rmtree(private, ignore_errors=True)

    def _cache_directory(self) -> Path | None:
        """The cache directory if it is (or could be made) trusted; one warning otherwise."""
        if not self._directory_checked:
            self._directory_checked = True
            try:
                make_private_directory(self.directory)
            except OSError as exc:
                problem: str | None = f"{self.directory} cannot be created: {exc}"
            else:
                problem = directory_problem(self.directory, os.geteuid())
            if problem is None:
                self._usable_directory = self.directory
            else:
                logger.warning(
                    "not using the native-loop cache %s (%s); building in a private"
                    " temporary directory instead", self.directory, problem,
                )
        return self._usable_directory

    def _load_or_build(self, directory: Path, source: str, name: str) -> ctypes.CDLL:
        target, record = directory / name, directory / _record_name(name)
        euid = os.geteuid()
        try:
            verify_against_record(target, record, euid)
        except UntrustedFile as reason:
            if os.path.lexists(target):
                logger.warning("rebuilding %s: %s", target, reason)
            self._build(directory, source, name)
            verify_against_record(target, record, euid)
        return ctypes.CDLL(str(target))

    def _build(self, directory: Path, source: str, name: str) -> None:
        assert self.compiler is not None  # _library_name checked it
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            src = Path(tmp) / source
            src.write_bytes(_source_bytes(source))
            built = Path(tmp) / name
            subprocess.run(
                [self.compiler, *CFLAGS, str(src), "-o", str(built)],
                check=True, capture_output=True, timeout=120,
            )
            data = built.read_bytes()
        # The library first, then its record: a reader pairing an old record with a new
        # library (or the reverse) sees a mismatch and rebuilds, never loads unverified code.
        write_atomic(directory, name, data, 0o700)
        write_atomic(directory, _record_name(name), f"{sha256_hex(data)}\n".encode(), 0o600)


@functools.cache
def default_loops() -> NativeLoops:
    """This process's loops in :func:`cache_root` (``default_loops.cache_clear()`` resets)."""
    return NativeLoops(cache_root())


def _record_name(library_name: str) -> str:
    return library_name.removesuffix(".so") + ".sha256"


def _source_bytes(source: str) -> bytes:
    return resources.files("ascend_kernels").joinpath("native", source).read_bytes()


def _find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


def _compiler_id(compiler: str) -> bytes:
    result = subprocess.run([compiler, "--version"], capture_output=True, timeout=30, check=False)
    return result.stdout.split(b"\n", 1)[0]

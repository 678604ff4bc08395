"""One-pass CPU loops in C for the reference ops that plain torch cannot do in one pass.

torch has no single kernel for ``bf16(float(x) * s + float(y))`` with ``s`` kept in float32
(``torch.add(y, x, alpha=s)`` rounds ``s`` to bfloat16 first), and its chunked float32 route
costs more than the unfused pair on the benchmark CPU. The C source ships in the wheel and is
compiled with the system C compiler on first use into
``$XDG_CACHE_HOME/ascend_kernels/`` (default ``~/.cache``), keyed by source, compiler and
machine, written atomically so concurrent processes never load a partial library. Without a
compiler, or when the build fails, :meth:`NativeLoops.muls_add_bf16` returns ``None`` and the
callers use their torch path, which gives the same bits.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import torch

logger = logging.getLogger("ascend_kernels.native_loops")

SOURCE = "muls_add_bf16.c"
# -ffp-contract=off: no fused multiply-add, so the product rounds to float32 like torch's mul.
CFLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math")

MulsAddLoop = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], None]


def cache_root() -> Path:
    """Where compiled loops are kept: ``$XDG_CACHE_HOME/ascend_kernels`` or ``~/.cache/...``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend_kernels"


class NativeLoops:
    """The compiled C loops of one build directory, loaded on first use."""

    def __init__(self, directory: Path, compiler: str | None = None) -> None:
        self.directory = directory
        self.compiler = compiler if compiler is not None else _find_compiler()
        self._library: ctypes.CDLL | None = None
        self._failed = False

    def library(self) -> ctypes.CDLL | None:
        """The loaded library, building it if needed; ``None`` if it cannot be built."""
        if self._library is None and not self._failed:
            try:
                self._library = ctypes.CDLL(str(self._build()))
            except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                self._failed = True
                logger.info("one-pass C loops unavailable, using torch paths: %s", exc)
        return self._library

    def muls_add_bf16(self) -> MulsAddLoop | None:
        """``loop(x, y, out, scale)`` over contiguous CPU bfloat16 tensors, or ``None``."""
        lib = self.library()
        if lib is None:
            return None
        fn = lib.ascend_muls_add_bf16
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_float]

        def loop(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, scale: float) -> None:
            fn(x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel(), scale)

        return loop

    def _build(self) -> Path:
        if self.compiler is None:
            raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
        source = resources.files("ascend_kernels").joinpath("native", SOURCE).read_bytes()
        key = hashlib.sha256(
            b"\0".join([source, " ".join(CFLAGS).encode(), _compiler_id(self.compiler),
                        platform.machine().encode()])
        ).hexdigest()[:16]
        target = self.directory / f"muls_add_bf16-{key}.so"
        if target.exists():
            return target
        self.directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.directory) as tmp:
            src = Path(tmp) / SOURCE
            src.write_bytes(source)
            built = Path(tmp) / target.name
            subprocess.run(
                [self.compiler, *CFLAGS, str(src), "-o", str(built)],
                check=True, capture_output=True, timeout=120,
            )
            os.replace(built, target)  # atomic: another process sees all of it or nothing
        return target


@functools.cache
def default_loops() -> NativeLoops:
    """This process's loops in :func:`cache_root` (``default_loops.cache_clear()`` resets)."""
    return NativeLoops(cache_root())


def _find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


def _compiler_id(compiler: str) -> bytes:
    result = subprocess.run([compiler, "--version"], capture_output=True, timeout=30, check=False)
    return result.stdout.split(b"\n", 1)[0]

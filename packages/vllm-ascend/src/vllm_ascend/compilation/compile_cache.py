"""``AscendCompiler``'s compile-cache files: handles, atomic writes, reading artifacts back.

An artifact is one file, ``<cache_dir>/<key>``, holding one fused graph (see
``ascend_graph.dumps_fused_graph``). The handle vLLM stores for it is ``(key, path)``, two
strings (vLLM's ``CompilerManager`` checks exactly that). On load the file is looked up as
``<cache_dir>/<key>`` whenever the cache dir is known, so a moved cache still works.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger("vllm_ascend.compilation.compiler")


def check_key(key: Any) -> str:
    """An artifact key must be a plain file name inside the cache dir."""
    if (not isinstance(key, str) or not key or key in (".", "..") or "/" in key
            or (os.altsep is not None and os.altsep in key) or os.sep in key):
        raise ValueError(
            f"compile-cache key {key!r} is not allowed; use a non-empty file name without "
            "path separators (vLLM passes e.g. 'artifact_compile_range_1_8_subgraph_0')"
        )
    return key


def parse_handle(handle: Any) -> tuple[str, str]:
    """``(key, path)`` from a handle returned by ``AscendCompiler.compile``."""
    if (not isinstance(handle, (tuple, list)) or len(handle) != 2
            or not all(isinstance(part, str) for part in handle)):
        raise ValueError(
            f"AscendCompiler.load got handle {handle!r}; expected the (key, path) pair of "
            "strings that AscendCompiler.compile returned"
        )
    return check_key(handle[0]), handle[1]


def artifact_path(cache_dir: str | None, key: str, fallback: str | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir) / key
    if fallback:
        return Path(fallback)
    raise ValueError("no compile-cache dir: call AscendCompiler.initialize_cache first")


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a
    partial write (a temporary file in the same directory, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_fused(path: Path, *, manager: Any, backend: str, compile_range: Any) -> Any:
    """The fused graph saved at ``path``, or None after one info log saying why it cannot be
    used (missing, unreadable, damaged, or made with other versions or settings)."""
    from ascend_graph import FusedGraphError, loads_fused_graph

    try:
        data = path.read_bytes()
    except OSError as exc:
        logger.info("AscendCompiler cache miss for %s (%s); compiling again", path,
                    "no such file" if isinstance(exc, FileNotFoundError) else exc)
        return None
    try:
        return loads_fused_graph(data, manager=manager, backend=backend,
                                 compile_range=compile_range)
    except FusedGraphError as exc:
        logger.info("AscendCompiler cache miss for %s (%s); compiling again", path, exc)
        return None

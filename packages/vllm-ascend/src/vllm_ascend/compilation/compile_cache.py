"""``AscendCompiler``'s compile-cache files: handles, atomic writes, reading artifacts back.

An artifact is one file, ``<cache_dir>/<key>``, holding one fused graph (see
``ascend_graph.dumps_fused_graph``) signed with this user's key (``artifact_signing``). The
handle vLLM stores for it is ``(key, path)``, two strings (vLLM's ``CompilerManager`` checks
exactly that). On load the file is looked up as ``<cache_dir>/<key>`` whenever the cache dir is
known, so a moved cache still works. Nothing is unpickled unless the file is a regular file in
a trusted directory (``runtime.trusted_paths``), owned by this user, and its signature checks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from vllm_ascend.compilation.artifact_signing import ArtifactSignatureError, ArtifactSigner
from vllm_ascend.runtime.trusted_paths import UntrustedPathError, read_trusted_file

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


def read_fused(path: Path, *, signer: ArtifactSigner, manager: Any, backend: str,
               compile_range: Any) -> Any:
    """The fused graph saved at ``path``, or None after one log line saying why it cannot be
    used: info for a missing, damaged or stale artifact (made with other versions or
    settings), a warning naming the file for one that could have been planted (untrusted
    location or owner, or a signature that is not this user's)."""
    from ascend_graph import FusedGraphError, loads_fused_graph

    try:
        payload = signer.verify(read_trusted_file(path))
    except FileNotFoundError:
        logger.info("AscendCompiler cache miss for %s (no such file); compiling again", path)
        return None
    except (UntrustedPathError, ArtifactSignatureError) as exc:
        logger.warning("AscendCompiler rejected the compile-cache artifact %s (%s); it is not "
                       "loaded, compiling again", path, exc)
        return None
    except OSError as exc:
        logger.info("AscendCompiler cache miss for %s (%s); compiling again", path, exc)
        return None
    try:
        return loads_fused_graph(payload, manager=manager, backend=backend,
                                 compile_range=compile_range)
    except FusedGraphError as exc:
        logger.info("AscendCompiler cache miss for %s (%s); compiling again", path, exc)
        return None


def read_code(path: Path, *, signer: ArtifactSigner) -> str | None:
    """npugraph_ex's generated code saved at ``path`` (it is executed when loaded, so only
    this user's signed file in a trusted directory counts), or None after one log line: info
    when there is none or it is damaged, a warning naming a file that could have been
    planted."""
    try:
        return signer.verify(read_trusted_file(path)).decode("utf-8")
    except FileNotFoundError:
        return None
    except (UntrustedPathError, ArtifactSignatureError) as exc:
        logger.warning("AscendCompiler rejected the npugraph_ex code %s (%s); it is not "
                       "loaded, compiling again", path, exc)
    except (OSError, UnicodeDecodeError) as exc:
        logger.info("AscendCompiler cannot use the npugraph_ex code %s (%s); compiling again",
                    path, exc)
    return None

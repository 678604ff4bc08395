"""``AscendCompiler``'s compile-cache files: handles, checksummed entries, reading them back."""
# Entries are read and written only through a TrustedDir checked at that use, so the checksum guards
# against damage (a truncated write, a bad disk), not forgery. The handle is (key, path), two
# strings, as vLLM's CompilerManager checks; the file is looked up by key, so a moved cache works.

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Final

from vllm_ascend.base.trusted_paths import (
    MAX_READ_BYTES,
    TrustedDir,
    UntrustedPathError,
    read_bounded_file,
    write_atomic,
)

logger = logging.getLogger(__name__)

ENTRY_MAGIC: Final = b"ascend-cache-entry v1 sha256="


class DamagedEntryError(ValueError):
    """A cache entry whose bytes do not match its checksum (or that is not an entry at all)."""


def encode_entry(payload: bytes) -> bytes:
    """``payload`` as the bytes of a cache entry: its sha256 in front."""
    return ENTRY_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode_entry(data: bytes, where: str | os.PathLike[str]) -> bytes:
    """The payload of cache entry ``data`` from ``where``; DamagedEntryError on a bad checksum."""
    if not data.startswith(ENTRY_MAGIC):
        raise DamagedEntryError(f"{where} is not a vllm-ascend cache entry")
    digest, sep, payload = data[len(ENTRY_MAGIC):].partition(b"\n")
    if not sep or digest != hashlib.sha256(payload).hexdigest().encode():
        raise DamagedEntryError(f"{where} does not match its sha256 (damaged)")
    return payload


def write_entry(path: str | os.PathLike[str], payload: bytes) -> None:
    """Write ``payload`` to ``path`` as a cache entry: atomically, with its sha256 in front."""
    write_atomic(path, encode_entry(payload))


def read_entry(path: str | os.PathLike[str], limit: int = MAX_READ_BYTES) -> bytes:
    """The payload of the entry at ``path``; UntrustedPathError or DamagedEntryError if unusable."""
    return decode_entry(read_bounded_file(path, limit), path)


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


def read_fused(cache: TrustedDir, key: str, *, manager: Any, backend: str,
               compile_range: Any) -> Any:
    """The fused graph saved as ``key`` in ``cache``, or None after one line saying why."""
    # Info for a missing or stale artifact; a warning naming the file for a damaged or odd one.
    from ascend_graph import FusedGraphError, loads_fused_graph

    path = cache.path / key
    try:
        payload = decode_entry(cache.read(key), path)
    except FileNotFoundError:
        logger.info("AscendCompiler cache miss for %s (no such file); compiling again", path)
        return None
    except (UntrustedPathError, DamagedEntryError) as exc:
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


def read_code(cache: TrustedDir, name: str) -> str | None:
    """npugraph_ex's saved code ``name`` in ``cache`` (run when loaded), or None after one line."""
    path = cache.path / name
    try:
        return decode_entry(cache.read(name), path).decode("utf-8")
    except FileNotFoundError:
        return None
    except (UntrustedPathError, DamagedEntryError) as exc:
        logger.warning("AscendCompiler rejected the npugraph_ex code %s (%s); it is not "
                       "loaded, compiling again", path, exc)
    except (OSError, UnicodeDecodeError) as exc:
        logger.info("AscendCompiler cannot use the npugraph_ex code %s (%s); compiling again",
                    path, exc)
    return None

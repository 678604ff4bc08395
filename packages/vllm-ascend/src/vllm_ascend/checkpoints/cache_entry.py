"""Converted checkpoints in the user's cache: trusted root, checksummed entries, atomic installs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from vllm_ascend.base.trusted_paths import make_private_dir, read_bounded_file
from vllm_ascend.checkpoints.verified_files import VerifiedFiles
from vllm_ascend.process.process_setup import current_process_setup

logger = logging.getLogger(__name__)

MANIFEST: Final = "manifest.json"
# Bumped whenever the converted files change for the same source: older entries are rebuilt.
ENTRY_FORMAT: Final = 1
_MANIFEST_LIMIT: Final = 1 << 20
_CHUNK: Final = 1 << 22


class CheckpointError(RuntimeError):
    """A checkpoint cannot be provided; the message says why and what to do."""


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The converted-checkpoint directory (0700) under the trusted cache root or its fallback."""
    env = os.environ if environ is None else environ
    roots = current_process_setup().roots
    wanted = env.get("XDG_CACHE_HOME") or roots.own_cache(env)
    base = roots.root(wanted, "XDG_CACHE_HOME", env)
    try:
        return make_private_dir(base / "vllm_ascend" / "checkpoints")
    except OSError as exc:
        raise CheckpointError(f"cannot make the checkpoint cache under {base}: {exc}") from None


def _manifest_for(directory: Path, source: str) -> dict[str, Any]:
    files = {
        path.name: {"sha256": sha256_file(path), "size": path.stat().st_size}
        for path in sorted(directory.iterdir())
        if path.is_file() and path.name != MANIFEST
    }
    return {"format": ENTRY_FORMAT, "source_sha256": source, "files": files}


def entry_problem(entry: Path, source: str, verified: VerifiedFiles | None = None) -> str | None:
    """Why ``entry`` is not a whole, undamaged entry made from ``source`` (None if it is)."""
    digest = verified.sha256 if verified is not None else sha256_file
    try:
        manifest = json.loads(read_bounded_file(entry / MANIFEST, _MANIFEST_LIMIT))
    except FileNotFoundError as exc:
        return f"{exc.filename} is missing"
    except (OSError, ValueError) as exc:
        return str(exc)
    except RecursionError:
        return f"{entry / MANIFEST} is nested too deeply to be a manifest"
    if not isinstance(manifest, dict) or manifest.get("format") != ENTRY_FORMAT:
        return f"{entry / MANIFEST} is not a format-{ENTRY_FORMAT} manifest"
    if manifest.get("source_sha256") != source:
        return f"{entry} was made from another source file"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return f"{entry / MANIFEST} lists no files"
    try:
        present = sorted(os.listdir(entry))
    except OSError as exc:
        return str(exc)
    unlisted = [name for name in present if name != MANIFEST and name not in files]
    if unlisted:
        # An added file changes what loaders read (a chat template, a generation config).
        return f"{entry} holds {', '.join(map(repr, unlisted[:5]))}, which its manifest does " \
               "not list"
    for name, record in files.items():
        path = entry / str(name)
        if os.path.basename(str(name)) != name or not isinstance(record, dict):
            return f"{entry / MANIFEST} has a bad record for {name!r}"
        try:
            if path.is_symlink() or not path.is_file():
                return f"{path} is missing or not a regular file"
            size = path.stat().st_size
            if size != record.get("size"):
                return f"{path} has {size} bytes, the manifest says {record.get('size')}"
            if digest(path) != record.get("sha256"):
                return f"{path} does not match its sha256 in the manifest"
        except OSError as exc:
            return str(exc)
    return None


def cached_entry(root: Path, name: str, source: str, build: Callable[[Path], None],
                 verified: VerifiedFiles | None = None) -> Path:
    """``root/name``: reused when whole, else built by ``build(directory)`` and moved into place."""
    entry = root / name
    if os.path.lexists(entry):
        problem = entry_problem(entry, source, verified)
        if problem is None:
            return entry
        logger.warning("rebuilding the damaged checkpoint %s: %s", entry, problem)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=root))
    try:
        build(staging)
        # Modes first: the files' last change comes before the manifest's hashing, so the
        # verification after install can record them (see .verified_files).
        for path in staging.iterdir():
            os.chmod(path, 0o600)
        manifest = json.dumps(_manifest_for(staging, source), indent=1, sort_keys=True)
        (staging / MANIFEST).write_text(manifest + "\n", encoding="utf-8")
        os.chmod(staging / MANIFEST, 0o600)
        _install(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    problem = entry_problem(entry, source, verified)
    if problem is not None:
        raise CheckpointError(f"the checkpoint just written to {entry} does not verify: {problem}")
    return entry


def _install(staging: Path, entry: Path) -> None:
    """Rename ``staging`` to ``entry``, moving a damaged ``entry`` aside first."""
    trash = None
    if os.path.lexists(entry):
        trash = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".old", dir=entry.parent))
        os.replace(entry, trash / "entry")
    try:
        os.rename(staging, entry)
    except OSError:
        # Another process installed the entry meanwhile: theirs is as good as ours.
        if not os.path.isdir(entry):
            raise
    finally:
        if trash is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(trash)

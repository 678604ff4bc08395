"""The ``tests/`` folder of vLLM's released source distribution, fetched once from the package
index the environment is configured with (``vllm_peer_index``: pip's and uv's settings, no
address written here), checked against its pinned sha256, kept in the user's cache (never
installed) and extracted afresh for every run.

Trust (the vllm-ascend README, "Trust and files"): the cache is a root checked by
``vllm_ascend.base.trusted_paths`` (it and every directory above it only this user's or
root's, not writable by others); a refused cache is one warning and a private fallback. The
pin covers the archive, so the tree that runs is never one left in the cache: the archive is
opened through the verified cache's descriptor (``O_NOFOLLOW``), hashed and extracted from that
same open file into a fresh private directory, removed after the run (:func:`remove_tests`).
The partial download is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` in the verified
directory, so a file or symlink planted at its name is never written through.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import vllm_peer_index as index
from vllm_ascend.base.trusted_paths import TrustedDir, open_trusted_dir
from vllm_ascend.base.trusted_roots import own_cache_dir, private_fallback


@dataclass(frozen=True)
class Sdist:
    """One pinned source distribution of vLLM, found by name in the configured index."""

    version: str
    sha256: str
    project: str = "vllm"

    @property
    def prefix(self) -> str:
        """The folder every member of the archive lies in."""
        return f"vllm-{self.version}"

    @property
    def filename(self) -> str:
        """The archive's file name in the index."""
        return f"{self.prefix}.tar.gz"


# The one sdist of vllm 0.32.0 (its sha256 as the public index states it).
VLLM_0_32_0 = Sdist(
    version="0.32.0",
    sha256="d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad",
)
# What is extracted: the test suite and the pytest settings (markers) it runs under.
_KEEP = ("tests/", "pyproject.toml")


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/vllm-ascend/peer-tests``, else ``~/.cache/vllm-ascend/peer-tests``
    (a stand-in home under the temp dir when there is no home)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(own_cache_dir())
    return Path(base) / "vllm-ascend" / "peer-tests"


def _sha256_of_file(handle: BinaryIO) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    with path.open("rb") as handle:
        return _sha256_of_file(handle)


_PART_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _download(sdist: Sdist, cache: TrustedDir, name: str, env: Mapping[str, str]) -> None:
    """Fetch the archive from the index configured in ``env`` as ``name`` in ``cache``: into
    ``<name>.<pid>.part`` made afresh (whatever was at that name is removed, never followed),
    checked, then renamed."""
    url, _ = index.locate(index.configured_indexes(env), sdist.project, sdist.filename,
                          sdist.sha256)
    partial = f"{name}.{os.getpid()}.part"
    cache.unlink(partial)  # a leftover or a planted link: the link is removed, not followed
    fd = os.open(partial, _PART_FLAGS, 0o600, dir_fd=cache.fd)
    try:
        with os.fdopen(fd, "w+b") as out:
            try:
                with urllib.request.urlopen(url, timeout=120) as answer:
                    shutil.copyfileobj(answer, out)
            except OSError as exc:
                raise RuntimeError(f"cannot download {url}: {exc}") from exc
            out.seek(0)
            got = _sha256_of_file(out)
        if got != sdist.sha256:
            raise RuntimeError(f"{url}: sha256 {got}, pinned {sdist.sha256}; not used")
        os.replace(partial, name, src_dir_fd=cache.fd, dst_dir_fd=cache.fd)
    except BaseException:
        cache.unlink(partial)
        raise


def _members(archive: tarfile.TarFile, sdist: Sdist) -> list[tarfile.TarInfo]:
    keep = [f"{sdist.prefix}/{name}" for name in _KEEP]
    chosen = []
    for member in archive.getmembers():
        if not any(member.name == k or member.name.startswith(k) for k in keep):
            continue
        if not (member.isfile() or member.isdir()):
            raise RuntimeError(f"{sdist.prefix}: member {member.name} is neither file nor folder")
        chosen.append(member)
    return chosen


def _open_cache(wanted: Path) -> TrustedDir:
    """``wanted`` checked by the root rule (created 0700), else one warning and the private
    fallback."""
    try:
        return open_trusted_dir(wanted, create=True)
    except OSError as exc:
        fallback = private_fallback("peer-tests")
        print(f"warning: not using the cache {wanted} ({exc}); using the private directory "
              f"{fallback} instead", file=sys.stderr)
        return open_trusted_dir(fallback)


def _open_pinned(cache: TrustedDir, name: str, sha256: str) -> BinaryIO | None:
    """The archive ``name`` in ``cache``, open, when it is a regular file with the pinned
    sha256 (positioned at its start); None otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=cache.fd)
    except OSError:
        return None
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode) or _sha256_of_file(handle) != sha256:
        handle.close()
        return None
    handle.seek(0)
    return handle


def extracted_tests(sdist: Sdist = VLLM_0_32_0, cache: Path | None = None,
                    env: Mapping[str, str] | None = None) -> Path:
    """A fresh private folder holding the sdist's ``tests/`` and ``pyproject.toml``,
    extracted from the archive in the cache (fetched from the index ``env`` configures, the
    process's by default, and verified on first use) as it was verified; the caller removes
    it with :func:`remove_tests`. RuntimeError when the archive cannot be had."""
    with _open_cache(default_cache() if cache is None else cache) as trusted:
        name = sdist.filename
        archive_file = _open_pinned(trusted, name, sdist.sha256)
        if archive_file is None:
            _download(sdist, trusted, name, os.environ if env is None else env)
            archive_file = _open_pinned(trusted, name, sdist.sha256)
            if archive_file is None:
                raise RuntimeError(f"{trusted.path / name} changed after it was verified")
        staging = Path(tempfile.mkdtemp(prefix=".run-", dir=trusted.path))
        try:
            with archive_file, tarfile.open(fileobj=archive_file, mode="r:gz") as archive:
                archive.extractall(staging, members=_members(archive, sdist), filter="data")
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return staging / sdist.prefix


def remove_tests(root: Path) -> None:
    """Remove a folder :func:`extracted_tests` made (and the private run folder it is in)."""
    if not root.parent.name.startswith(".run-"):
        raise ValueError(f"{root} was not made by extracted_tests")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(root.parent)

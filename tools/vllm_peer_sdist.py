"""The ``tests/`` folder of vLLM's released source distribution, fetched from PyPI once,
checked against its pinned sha256, and kept extracted in the user's cache (never installed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sdist:
    """One pinned source distribution on PyPI."""

    version: str
    url: str
    sha256: str

    @property
    def prefix(self) -> str:
        """The folder every member of the archive lies in."""
        return f"vllm-{self.version}"


# From PyPI's simple index for vllm (the one sdist of 0.32.0).
VLLM_0_32_0 = Sdist(
    version="0.32.0",
    url="https://files.pythonhosted.org/packages/d5/df/"
    "5471312c76e335eaa2b8333e87ea39f0d37bfe24f10a582620e34ff12e33/vllm-0.32.0.tar.gz",
    sha256="d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad",
)
# What is extracted: the test suite and the pytest settings (markers) it runs under.
_KEEP = ("tests/", "pyproject.toml")


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/vllm-ascend/peer-tests``, else ``~/.cache/vllm-ascend/peer-tests``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-ascend" / "peer-tests"


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(sdist: Sdist, target: Path) -> None:
    partial = target.with_name(target.name + f".{os.getpid()}.part")
    try:
        with urllib.request.urlopen(sdist.url, timeout=120) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"cannot download {sdist.url}: {exc}") from exc
    got = sha256_of(partial)
    if got != sdist.sha256:
        partial.unlink()
        raise RuntimeError(f"{sdist.url}: sha256 {got}, pinned {sdist.sha256}; not used")
    partial.replace(target)


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


def extracted_tests(sdist: Sdist = VLLM_0_32_0, cache: Path | None = None) -> Path:
    """The folder holding the sdist's ``tests/`` and ``pyproject.toml``: fetched, verified and
    extracted on first use (into a temporary folder renamed into place, so a crashed run
    never leaves a half-extracted tree), reused after."""
    root = default_cache() if cache is None else cache
    final = root / f"{sdist.prefix}-{sdist.sha256[:12]}"
    if (final / "tests" / "conftest.py").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    archive_path = root / f"{sdist.prefix}.tar.gz"
    if not archive_path.is_file() or sha256_of(archive_path) != sdist.sha256:
        _download(sdist, archive_path)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=root))
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            archive.extractall(staging, members=_members(archive, sdist), filter="data")
        try:
            (staging / sdist.prefix).rename(final)
        except OSError:
            if not (final / "tests" / "conftest.py").is_file():  # not a concurrent winner
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final

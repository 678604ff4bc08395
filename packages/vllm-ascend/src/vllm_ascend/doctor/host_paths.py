"""Where the doctor looks: this host's filesystem and environment, or a recorded host tree
(``--root DIR`` stands for ``/``: absolute paths, the environment's included, are looked up
under it). Files are read with a size bound; special files are refused."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

READ_LIMIT = 1 << 20  # version files and /proc tables are a few KiB


@dataclass(frozen=True)
class HostPaths:
    """The filesystem root and the environment the checks read."""

    root: Path = Path("/")
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def at(self, path: str | os.PathLike[str]) -> Path:
        """``path`` (absolute, as the host names it) under the root."""
        text = os.fspath(path)
        return self.root / text.lstrip("/") if self.root != Path("/") else Path(text)

    def env_dirs(self, name: str) -> list[str]:
        """The non-empty entries of a ``:``-separated variable, as written."""
        return [p for p in self.environ.get(name, "").split(":") if p]

    def home(self) -> str | None:
        """The user's home: ``HOME``, else (this host only) the passwd entry's; None when there
        is neither (a uid without a passwd entry)."""
        if self.environ.get("HOME"):
            return self.environ["HOME"]
        if self.root != Path("/"):
            return None
        try:  # the passwd entry's home (doctor sits below the trusted-paths helpers)
            return pwd.getpwuid(os.getuid()).pw_dir or None
        except KeyError:
            return None

    def read_text(self, path: str | os.PathLike[str], limit: int = READ_LIMIT) -> str | None:
        """A regular file's text (at most ``limit`` bytes), None when missing or special."""
        target = self.at(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.read(fd, limit).decode("utf-8", "replace")
        finally:
            os.close(fd)

    def same_dir(self, a: str, b: str) -> bool:
        """Whether two host paths name the same directory (symlinks like ``latest``
        resolved under the root)."""
        return os.path.realpath(self.at(a)) == os.path.realpath(self.at(b))

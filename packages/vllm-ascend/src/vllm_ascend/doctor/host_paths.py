"""Where the doctor looks: this host, or a recorded tree (``--root DIR`` stands for ``/``).

Nothing here raises for what it finds: unusable paths are recorded in :attr:`HostPaths.unusable`
with the reason; files are read with a size bound.
"""
# Under a recorded root every symbolic link, absolute ones included, resolves inside the root.

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_ascend.doctor.findings import WARN, Finding

READ_LIMIT = 1 << 20  # version files are a few KiB
_CHUNK = 1 << 16
# Symbolic links followed while resolving one path (the kernel's limit: MAXSYMLINKS).
MAX_LINKS = 40
# A path longer than this is shortened in reports (a value too long for the file system).
_SHOWN = 160
# Missing is an answer, not a problem.
_ABSENT = (errno.ENOENT, errno.ENOTDIR)
_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"))


def shown(path: str) -> str:
    """``path`` for a report: shortened when it is longer than any usable path."""
    if len(path) <= _SHOWN:
        return path
    return f"{path[:_SHOWN]}... ({len(path)} characters)"


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


@dataclass(frozen=True)
class HostPaths:
    """The filesystem root and environment the checks read, and the paths they could not use."""

    root: Path = Path("/")
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    unusable: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def recorded(self) -> bool:
        return self.root != Path("/")

    def note(self, path: str | os.PathLike[str], problem: str) -> None:
        """Record that ``path`` (as the host names it) could not be used, and why."""
        self.unusable.setdefault(shown(os.fspath(path)), problem)

    def at(self, path: str | os.PathLike[str]) -> Path:
        """``path`` on the filesystem (links resolved inside a recorded root); ``OSError``."""
        text = os.fspath(path)
        if not self.recorded:
            return Path(text)
        pending = [p for p in reversed(text.split("/")) if p not in ("", ".")]
        done: list[str] = []
        links = 0
        while pending:
            part = pending.pop()
            if part == "..":
                if done:
                    done.pop()
                continue
            here = self.root.joinpath(*done, part)
            if not stat.S_ISLNK(os.lstat(here).st_mode):
                done.append(part)
                continue
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), text)
            target = os.readlink(here)
            if target.startswith("/"):
                done = []  # the tree's "/" is the root
            pending.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
        return self.root.joinpath(*done)

    def _stat(self, path: str) -> os.stat_result | None:
        """``stat`` of a host path; None (noted) when it is missing or unusable."""
        try:
            return os.stat(self.at(path))
        except OSError as exc:
            if exc.errno not in _ABSENT:
                self.note(path, exc.strerror or str(exc))
            return None
        except ValueError as exc:  # a NUL byte
            self.note(path, str(exc))
            return None

    def is_dir(self, path: str) -> bool:
        found = self._stat(path)
        return found is not None and stat.S_ISDIR(found.st_mode)

    def is_file(self, path: str) -> bool:
        found = self._stat(path)
        return found is not None and stat.S_ISREG(found.st_mode)

    def list_dir(self, path: str) -> list[str]:
        """The sorted entry names of a folder; empty when it is missing or unusable."""
        try:
            return sorted(os.listdir(self.at(path)))
        except OSError as exc:
            if exc.errno not in _ABSENT:
                self.note(path, exc.strerror or str(exc))
            return []

    def env_dirs(self, name: str) -> list[str]:
        """The non-empty entries of a ``:``-separated variable, as written."""
        return [p for p in self.environ.get(name, "").split(":") if p]

    def home(self) -> str | None:
        """The user's home (``HOME``, else passwd on this host); None when there is neither."""
        if self.environ.get("HOME"):
            return self.environ["HOME"]
        if self.recorded:
            return None
        try:  # the passwd entry's home (doctor sits below the trusted-paths helpers)
            return pwd.getpwuid(os.getuid()).pw_dir or None
        except KeyError:
            return None

    def read_text(self, path: str, limit: int = READ_LIMIT) -> str | None:
        """A regular file's text; None when missing, or (noted) special, unreadable or too large."""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.at(path), flags | (os.O_NOFOLLOW if self.recorded else 0))
        except OSError as exc:
            if exc.errno not in _ABSENT:
                self.note(path, exc.strerror or str(exc))
            return None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                self.note(path, f"a {kind_of(mode)}, not a regular file")
                return None
            data = b""
            while len(data) <= limit:
                chunk = os.read(fd, min(_CHUNK, limit + 1 - len(data)))
                if not chunk:
                    return data.decode("utf-8", "replace")
                data += chunk
            self.note(path, f"larger than {limit} bytes")
            return None
        except OSError as exc:
            self.note(path, exc.strerror or str(exc))
            return None
        finally:
            os.close(fd)

    def real_dir(self, path: str) -> Path | None:
        """The folder ``path`` names, links resolved; None when it is not a usable folder."""
        if not self.is_dir(path):
            return None
        try:
            return Path(os.path.realpath(path)) if not self.recorded else self.at(path)
        except OSError as exc:
            self.note(path, exc.strerror or str(exc))
            return None

    def same_dir(self, a: str, b: str) -> bool:
        """Whether two host paths name the same folder (symlinks like ``latest`` resolved)."""
        first, second = self.real_dir(a), self.real_dir(b)
        return first is not None and first == second


def unusable_finding(paths: HostPaths) -> Finding | None:
    """One finding naming every path the checks could not use, and why."""
    if not paths.unusable:
        return None
    listed = "; ".join(f"{path} ({why})" for path, why in paths.unusable.items())
    return Finding("unusable-paths", WARN, f"the checks could not use: {listed}",
                   fix="correct the variable that names each path, or its permissions",
                   details={"paths": dict(paths.unusable)})

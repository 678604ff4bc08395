"""Which files and directories this process may load from or write logs into.

A path is trusted when nobody but the current user (or root) could have put or changed what
is there: every directory from ``/`` down to it is owned by the current user or root and is
not writable by group or others (a root-owned sticky directory such as ``/tmp`` is allowed as
an ancestor, since others cannot replace entries they do not own there), and the path itself
is owned by the current user, is not a symlink and is not writable by group or others.
That is the rule OpenSSH applies to ``authorized_keys``; vLLM itself checks nothing.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_READ_BYTES = 1 << 30


class UntrustedPathError(OSError):
    """A path that another user could have written; the message says which part and why."""


def _problem(path: Path, st: os.stat_result, *, own: bool) -> str | None:
    euid = os.geteuid()
    if st.st_uid not in ((euid,) if own else (euid, 0)):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {euid})"
    if st.st_mode & 0o022:
        sticky_root_dir = (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
                           and st.st_uid == 0 and not own)
        if not sticky_root_dir:
            return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check_trusted_dir(directory: str | os.PathLike[str]) -> Path:
    """``directory`` as an absolute Path when trusted; :class:`UntrustedPathError` otherwise."""
    path = Path(os.path.abspath(directory))
    for ancestor in reversed(path.parents):
        problem = _problem(ancestor, os.stat(ancestor), own=False)
        if problem:
            raise UntrustedPathError(problem)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedPathError(f"{path} is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedPathError(f"{path} is not a directory")
    problem = _problem(path, st, own=True)
    if problem:
        raise UntrustedPathError(problem)
    return path


def make_private_dir(directory: str | os.PathLike[str]) -> Path:
    """Create ``directory`` (mode 0700, missing parents too) and return it when trusted."""
    path = Path(os.path.abspath(directory))
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    for new in reversed(missing):
        # Path.mkdir(parents=True) would give the parents the umask's mode instead.
        new.mkdir(mode=0o700, exist_ok=True)
    return check_trusted_dir(path)


def read_trusted_file(path: str | os.PathLike[str], limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of a regular file in a trusted directory, owned by this user and not writable
    by others, read without following a symlink and at most ``limit`` bytes long."""
    path = Path(os.path.abspath(path))
    check_trusted_dir(path.parent)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedPathError(f"{path} is a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPathError(f"{path} is not a regular file")
        problem = _problem(path, st, own=True)
        if problem:
            raise UntrustedPathError(problem)
        if st.st_size > limit:
            raise UntrustedPathError(f"{path} is {st.st_size} bytes, over the {limit}-byte limit")
        chunks = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise UntrustedPathError(f"{path} grew over the {limit}-byte limit while read")
        return data
    finally:
        os.close(fd)

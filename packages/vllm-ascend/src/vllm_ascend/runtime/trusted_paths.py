"""Which files and directories this process may load from or write logs into.

A path is trusted when nobody but the current user (or root) could have put or changed what
is there: every directory from ``/`` down to it is owned by the current user or root and is
not writable by group or others (a root-owned sticky directory such as ``/tmp`` is allowed as
an ancestor, since others cannot replace entries they do not own there), and the path itself
is owned by the current user, is not a symlink and is not writable by group or others.
Every component is inspected with ``lstat``: a symlink on the way is followed only when the
current user or root owns it (its owner decides, and can change, where it points), and its
target is checked by the same rules. That is the rule OpenSSH applies to ``authorized_keys``;
vLLM itself checks nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

MAX_READ_BYTES = 1 << 30
_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup


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


def _walk(path: Path, *, create: bool) -> os.stat_result:
    """``lstat`` every component of the absolute ``path`` from ``/`` down, never letting the
    kernel follow a link: each directory on the way must pass the ancestor rule, and a
    symlink on the way is followed (its target checked the same way) only when this user or
    root owns it, since its owner decides where it points. Missing components are made
    (mode 0700) when ``create``. Returns the ``lstat`` of the last component, which is
    left to the caller (it may be a symlink)."""
    euid = os.geteuid()
    current = Path("/")
    st = os.lstat(current)
    pending = list(reversed(path.parts[1:]))
    links = 0
    while True:
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(current))
        problem = _problem(current, st, own=False)
        if problem:
            raise UntrustedPathError(problem)
        name = pending.pop()
        while name == ".." and pending:  # a symlink target may climb; ``current`` is real
            current, name = current.parent, pending.pop()
        candidate = current.parent if name == ".." else current / name
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile: inspected below
                os.mkdir(candidate, 0o700)
            st = os.lstat(candidate)
        if stat.S_ISLNK(st.st_mode) and pending:  # a link on the way to the path
            if st.st_uid not in (euid, 0):
                raise UntrustedPathError(
                    f"{candidate} is a symlink owned by uid {st.st_uid}, not by this user "
                    f"(uid {euid}) or root")
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
            target = Path(os.readlink(candidate))
            pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
            if target.is_absolute():
                current = Path("/")
            st = os.lstat(current)
            continue
        if not pending:
            return st
        current = candidate


def _check_last(path: Path, st: os.stat_result) -> Path:
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedPathError(f"{path} is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise UntrustedPathError(f"{path} is not a directory")
    problem = _problem(path, st, own=True)
    if problem:
        raise UntrustedPathError(problem)
    return path


def check_trusted_dir(directory: str | os.PathLike[str]) -> Path:
    """``directory`` as an absolute Path when trusted; :class:`UntrustedPathError` otherwise.

    Every component is inspected without following it (``lstat``), so a symlink another
    user owns, anywhere on the path, is refused rather than trusted by where it points."""
    path = Path(os.path.abspath(directory))
    if path == Path("/"):
        return _check_last(path, os.lstat(path))
    return _check_last(path, _walk(path, create=False))


def make_private_dir(directory: str | os.PathLike[str]) -> Path:
    """Create ``directory`` (mode 0700, parents as needed) and return it when trusted.

    Components are created one at a time after the one above passed the checks of
    :func:`check_trusted_dir`, so nothing is created under an untrusted directory."""
    path = Path(os.path.abspath(directory))
    if path == Path("/"):
        return _check_last(path, os.lstat(path))
    return _check_last(path, _walk(path, create=True))


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

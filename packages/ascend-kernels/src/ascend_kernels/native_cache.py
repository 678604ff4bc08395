"""Trusted on-disk locations for compiled native code.

A compiled library is code this process will run, so it is read only from places that the
current user alone could have written:

- the directory itself is a real directory (not a symlink), owned by the effective uid and not
  writable by group or others;
- every directory its path goes through is owned by the effective uid or root, and is either
  not writable by group/others or has the sticky bit (like ``/tmp``: nobody else may then
  rename or delete our entry in it); each component is inspected with ``lstat``, and a
  symlink on the way is followed (its target checked the same way) only when the effective
  uid or root owns it, since a link's owner decides, and can change, where it points;
- a file is a regular file (opened with ``O_NOFOLLOW``), owned by the effective uid, not
  writable by group or others, and its bytes hash to the sha256 recorded next to it when this
  user built it.

Files are written through a temporary name in the same directory and ``os.replace``, so a
reader never sees a partial file. New directories are created 0700.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

# Write permission for group or others.
SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH
_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup


class UntrustedFile(Exception):
    """A file that must not be used: missing, foreign, shared-writable, a link, or damaged."""


def directory_problem(path: Path, euid: int) -> str | None:
    """Why ``path`` (a directory) cannot be trusted by ``euid``, or ``None`` if it can."""
    try:
        own = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be inspected: {exc}"
    if stat.S_ISLNK(own.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(own.st_mode):
        return f"{path} is not a directory"
    if own.st_uid != euid:
        return f"{path} is owned by uid {own.st_uid}, not by this user (uid {euid})"
    if own.st_mode & SHARED_WRITE:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(own.st_mode):o})"
    return _ancestor_problem(Path(os.path.abspath(path)).parent, path, euid)


def _ancestor_problem(directory: Path, path: Path, euid: int) -> str | None:
    """Why a directory above ``path`` cannot be trusted, walking ``directory`` from ``/`` one
    ``lstat`` at a time: a symlink on the way is followed only when ``euid`` or root owns it
    (its owner decides, and can change, where it points), and its target is walked the same
    way."""
    current = Path("/")
    pending = list(reversed(directory.parts[1:]))
    links = 0
    while True:
        try:
            info = os.lstat(current)
        except OSError as exc:
            return f"{current} cannot be inspected: {exc}"
        if info.st_uid not in (euid, 0):
            return f"{current} (above {path}) is owned by uid {info.st_uid}"
        if info.st_mode & SHARED_WRITE and not info.st_mode & stat.S_ISVTX:
            return (
                f"{current} (above {path}) is writable by group or others without the sticky"
                f" bit (mode {stat.S_IMODE(info.st_mode):o})"
            )
        if not pending:
            return None
        name = pending.pop()
        candidate = current.parent if name == ".." else current / name
        try:
            link = os.lstat(candidate)
        except OSError as exc:
            return f"{candidate} cannot be inspected: {exc}"
        if not stat.S_ISLNK(link.st_mode):
            current = candidate
            continue
        if link.st_uid not in (euid, 0):
            return f"{candidate} (above {path}) is a symlink owned by uid {link.st_uid}"
        links += 1
        if links > _MAX_LINKS:
            return f"{path} cannot be inspected: more than {_MAX_LINKS} symlinks on the way"
        try:
            target = Path(os.readlink(candidate))
        except OSError as exc:  # replaced since the lstat
            return f"{candidate} cannot be inspected: {exc}"
        pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
        if target.is_absolute():
            current = Path("/")


def make_private_directory(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (existing ones are left alone)."""
    missing: list[Path] = []
    current = Path(os.path.abspath(path))
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue  # another process created it meanwhile; it is inspected before use
        os.chmod(directory, 0o700)  # the umask may have removed bits, never adds any


def write_atomic(directory: Path, name: str, data: bytes, mode: int) -> Path:
    """Write ``directory/name`` through a temporary file and ``os.replace`` (mode ``mode``)."""
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        target = directory / name
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def read_trusted(path: Path, euid: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of ``euid`` not writable by others.

    Raises :class:`UntrustedFile` otherwise (also when it does not exist).
    """
    try:
        # O_NONBLOCK: a FIFO planted under the name must not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise UntrustedFile(f"{path} does not exist") from exc
    except OSError as exc:  # ELOOP: a symlink
        raise UntrustedFile(f"{path} cannot be opened safely: {exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFile(f"{path} is not a regular file")
        if info.st_uid != euid:
            raise UntrustedFile(f"{path} is owned by uid {info.st_uid}, not by uid {euid}")
        if info.st_mode & SHARED_WRITE:
            raise UntrustedFile(f"{path} is writable by group or others")
        return fh.read()


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def verify_against_record(path: Path, record: Path, euid: int) -> None:
    """Check that ``path``'s sha256 equals the digest stored in ``record`` (both trusted).

    Raises :class:`UntrustedFile` with the reason when either file is untrusted or they differ.
    """
    expected = read_trusted(record, euid).decode("ascii", "replace").strip()
    actual = sha256_hex(read_trusted(path, euid))
    if actual != expected:
        raise UntrustedFile(f"{path} does not match its recorded sha256 (damaged or replaced)")

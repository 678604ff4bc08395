"""The plugin's one trust policy for files (the package README, "Trust and files")."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from pathlib import Path
from types import TracebackType

MAX_READ_BYTES = 1 << 30
_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UntrustedPathError(OSError):
    """A path or file the policy refuses; the message says which part and why."""


def _above_problem(where: Path, st: os.stat_result) -> str | None:
    """Why the directory ``where`` may not lie above a root (None when it may)."""
    euid = os.geteuid()
    if st.st_uid not in (euid, 0):
        return f"{where} (above the root) is owned by uid {st.st_uid}, not by this user " \
               f"(uid {euid}) or root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (f"{where} (above the root) is writable by group or others without the sticky "
                f"bit (mode {stat.S_IMODE(st.st_mode):o}): they could swap what is below it")
    return None


def _root_problem(path: Path, st: os.stat_result) -> str | None:
    euid = os.geteuid()
    if st.st_uid != euid:
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {euid})"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _open_component(fd: int, name: str, where: Path) -> int | None:
    """The descriptor of directory ``name`` in ``fd``; None when it became a symlink meanwhile."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        if exc.errno == errno.ENOTDIR:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                     str(where)) from None
        raise


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute without collapsing ``..``."""
    # abspath collapses .. in the text; the kernel follows a symlink before .. leaves it.
    text = os.fspath(path)
    return Path(text if os.path.isabs(text) else os.path.join(os.getcwd(), text))


def _walk(path: Path, *, create: bool) -> tuple[int, Path]:
    """Open ``path`` one checked component at a time from ``/``: (descriptor, real path)."""
    euid = os.geteuid()
    chain: list[tuple[int, Path]] = []  # the directories opened, "/" first
    try:
        top = os.open("/", _DIR_FLAGS)
        chain.append((top, Path("/")))
        pending = list(reversed(path.parts[1:]))
        links = 0
        while pending:
            name = pending.pop()
            fd, where = chain[-1]
            if name in ("", "."):
                continue
            if name == "..":
                if len(chain) > 1:
                    os.close(chain.pop()[0])
                continue
            problem = _above_problem(where, os.fstat(fd))
            if problem:
                raise UntrustedPathError(problem)
            candidate = where / name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT),
                                            str(candidate)) from None
                with contextlib.suppress(FileExistsError):  # made meanwhile: inspected below
                    os.mkdir(name, 0o700, dir_fd=fd)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (euid, 0):
                    raise UntrustedPathError(
                        f"{candidate} is a symlink owned by uid {st.st_uid}, not by this user "
                        f"(uid {euid}) or root")
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
                target = Path(os.readlink(name, dir_fd=fd))
                if target.is_absolute():
                    while len(chain) > 1:
                        os.close(chain.pop()[0])
                    pending.extend(reversed(target.parts[1:]))
                else:
                    pending.extend(reversed(target.parts))
                continue
            if not stat.S_ISDIR(st.st_mode):
                if pending:
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                             str(candidate))
                raise UntrustedPathError(f"{path} is not a directory")
            opened = _open_component(fd, name, candidate)
            if opened is None:  # swapped for a link meanwhile: look at it again
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
                pending.append(name)
                continue
            chain.append((opened, candidate))
        fd, reached = chain.pop()
        return fd, reached
    finally:
        for fd, _ in chain:
            os.close(fd)


class TrustedDir:
    """A directory that passed the root rule, held open (entries used relative to its
    descriptor)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def __enter__(self) -> TrustedDir:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read(self, name: str, limit: int = MAX_READ_BYTES) -> bytes:
        """The bytes of regular file ``name`` here (see :func:`read_bounded_file`)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UntrustedPathError(f"{self.path / name} is a symlink") from None
            raise type(exc)(exc.errno, exc.strerror, str(self.path / name)) from None
        return _read_fd(fd, self.path / name, limit)

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write ``name`` here (0600): temporary file, ``fsync``, rename, all relative to the
        descriptor."""
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def unlink(self, name: str) -> None:
        """Remove ``name`` from this directory if it is there."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)


def open_trusted_dir(directory: str | os.PathLike[str], *, create: bool = False) -> TrustedDir:
    """``directory`` held open when it passes the root rule; :class:`UntrustedPathError` if not."""
    path = absolute(directory)
    fd, reached = _walk(path, create=create)
    if ".." in path.parts:
        path = reached
    try:
        problem = _root_problem(path, os.fstat(fd))
        if problem:
            raise UntrustedPathError(problem)
    except BaseException:
        os.close(fd)
        raise
    return TrustedDir(path, fd)


def check_trusted_dir(directory: str | os.PathLike[str]) -> Path:
    """``directory`` (absolute) when it passes the root rule now, else UntrustedPathError."""
    # Reads must still go through open_trusted_dir: a later swap is not covered by this check.
    with open_trusted_dir(directory) as trusted:
        return trusted.path


def make_private_dir(directory: str | os.PathLike[str]) -> Path:
    """:func:`check_trusted_dir` after creating what is missing (0700, one component at a time)."""
    with open_trusted_dir(directory, create=True) as trusted:
        return trusted.path


def _read_fd(fd: int, path: str | os.PathLike[str], limit: int) -> bytes:
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPathError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise UntrustedPathError(f"{path} is {st.st_size} bytes, over the {limit}-byte limit")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UntrustedPathError(f"{path} grew over the {limit}-byte limit while read")
    return data


def read_bounded_file(path: str | os.PathLike[str], limit: int = MAX_READ_BYTES) -> bytes:
    """At most ``limit`` bytes of regular file ``path`` (links, special or longer files refused)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedPathError(f"{path} is a symlink") from None
        raise
    return _read_fd(fd, path, limit)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``path`` (0600) via a temporary file and ``os.replace``: never a partial file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

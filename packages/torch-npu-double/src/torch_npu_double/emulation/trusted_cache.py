"""The trust rule for the folder the emulated device's C++ library is built in and loaded from.

Another local user who can write a folder on the way to the cache, or who owns a symlink on
it, could swap the library this process loads. So a cache folder counts only when every folder
from ``/`` down is this user's or root's and not writable by group or others (sticky folders
such as ``/tmp`` aside: there nobody else can rename the entry below), every symlink on the
way is this user's or root's, and the folder itself is this user's and not writable by group
or others. The walk opens one component at a time relative to the folder above it
(``O_NOFOLLOW``) and checks what it opened, so a swap during the walk is seen. Missing folders
are created 0700. The same rule as the plugin's cache roots, written here so that this
member needs no vLLM and no vllm-ascend.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
import tempfile
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup


class UntrustedPathError(OSError):
    """A folder the rule refuses; the message says which part and why."""


def own_cache_dir() -> Path:
    """``~/.cache`` of this user (``HOME``, else the passwd entry); without a home (a container
    running a uid with no passwd entry) ``<tmp>/torch-npu-double-<uid>/.cache``."""
    home = os.environ.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = None
    base = Path(home) if home else Path(tempfile.gettempdir()) / f"torch-npu-double-{os.geteuid()}"
    return base / ".cache"


def _check_above(where: Path, st: os.stat_result) -> None:
    euid = os.geteuid()
    if st.st_uid not in (euid, 0):
        raise UntrustedPathError(f"{where} (above the root) is owned by uid {st.st_uid}, not by "
                                 f"this user (uid {euid}) or root")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UntrustedPathError(
            f"{where} (above the root) is writable by group or others without the sticky bit "
            f"(mode {stat.S_IMODE(st.st_mode):o}): they could swap what is below it")


def _check_root(path: Path, st: os.stat_result) -> None:
    euid = os.geteuid()
    if st.st_uid != euid:
        raise UntrustedPathError(f"{path} is owned by uid {st.st_uid}, not by this user "
                                 f"(uid {euid})")
    if st.st_mode & 0o022:
        raise UntrustedPathError(
            f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


def open_trusted_dir(directory: Path, *, create: bool = False) -> tuple[int, Path]:
    """A descriptor of ``directory`` once it passes the rule, and its path: ``directory`` made
    absolute, or, when it holds ``..`` (resolved as the kernel does, after a symlink), the
    folder reached. Missing folders are made 0700 when ``create``. The caller closes the
    descriptor. :class:`UntrustedPathError` says why a folder is refused."""
    path = Path(os.path.join(os.getcwd(), directory))
    euid = os.geteuid()
    chain = [(os.open("/", _DIR_FLAGS), Path("/"))]  # the folders opened, "/" first
    try:
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
            _check_above(where, os.fstat(fd))
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: looked at below
                    os.mkdir(name, 0o700, dir_fd=fd)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (euid, 0):
                    raise UntrustedPathError(
                        f"{where / name} is a symlink owned by uid {st.st_uid}, not by this "
                        f"user (uid {euid}) or root")
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
                target = Path(os.readlink(name, dir_fd=fd))
                if target.is_absolute():
                    while len(chain) > 1:
                        os.close(chain.pop()[0])
                pending.extend(reversed(target.parts[1:] if target.is_absolute()
                                        else target.parts))
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                         str(where / name))
            try:
                opened = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                pending.append(name)  # swapped for a symlink meanwhile: look at it again
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None
                continue
            chain.append((opened, where / name))
        fd, reached = chain.pop()
        if ".." in path.parts:
            path = reached
        try:
            _check_root(path, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return fd, path
    finally:
        for fd, _ in chain:
            os.close(fd)


def make_private_dir(directory: Path) -> Path:
    """``directory`` (its path as :func:`open_trusted_dir` names it) after creating what is
    missing (0700, one folder at a time) and checking the whole path by the rule."""
    fd, path = open_trusted_dir(directory, create=True)
    os.close(fd)
    return path

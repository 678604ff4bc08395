"""Bounded, symlink-free file access for recorded hosts, sysfs/procfs and ``capture``.

Reads refuse symbolic links and special files (FIFOs, devices, sockets) before reading a byte
(the trust policy stated in vllm-ascend's ``base/trusted_paths`` and its README, "Trust
and files"): the path is opened with ``O_NOFOLLOW | O_NONBLOCK`` (so a FIFO cannot block the open)
and the open file is ``fstat``-ed; what is read is what was checked. Every read stops at a
stated limit. Writes go into a fresh
staging folder, through a directory descriptor opened with ``O_NOFOLLOW``, never open an
existing name, and reach the target folder by rename.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path

from ascend_topology.errors import TopologyError

KIB = 1024
MIB = 1024 * KIB
RECORDED_FILE_LIMIT = 4 * MIB
"""Largest recorded npu-smi/lscpu/lspci output (and largest live command output)."""
HOST_JSON_LIMIT = 1 * MIB
"""Largest ``host.json``."""
SYSFS_FILE_LIMIT = 64 * KIB
"""Largest sysfs/procfs attribute read (``cpulist``, ``thread_siblings_list``, ``comm``)."""
INTERRUPTS_LIMIT = 64 * MIB
"""Largest ``/proc/interrupts`` (one column per CPU: about 11 bytes x CPUs x IRQs)."""
_CHUNK = 64 * KIB


def check_path_text(value: str, what: str) -> str:
    """Return ``value`` unless it holds a NUL byte (which no path can contain)."""
    if "\0" in value:
        raise TopologyError(f"{what} {value!r} contains a NUL byte; paths cannot hold one")
    return value


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISREG, "regular file"), (stat.S_ISLNK, "symbolic link"),
             (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISDIR, "directory"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _refuse(path: Path, mode: int) -> TopologyError:
    return TopologyError(f"{path} is a {_kind(mode)}, not a regular file; refused")


def read_limited(path: Path, limit: int, *, strict: bool = False) -> str:
    """Read a regular file of at most ``limit`` bytes as UTF-8 (a leading byte-order mark
    dropped; bad bytes replaced, or with ``strict`` refused: a recorded file is text).

    Raises ``TopologyError`` for symbolic links, special files, files over the limit and, with
    ``strict``, bytes that are not UTF-8; ``OSError`` (e.g. ``FileNotFoundError``) passes
    through for the caller to word.
    """
    check_path_text(str(path), "file name")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, stat.S_IFLNK) from None
        if exc.errno == errno.ENXIO:  # a socket cannot be opened: say what it is
            raise _refuse(path, os.lstat(path).st_mode) from None
        raise
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise _refuse(path, opened.st_mode)
        data = bytearray()
        while True:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
            if len(data) > limit:
                raise TopologyError(f"{path} is larger than the {_size(limit)} limit; refused")
    finally:
        os.close(fd)
    # A leading byte-order mark (Windows editors write one) is not part of the content.
    try:
        return data.decode("utf-8", errors="strict" if strict else "replace").removeprefix(
            "\ufeff")
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                            f"offset {exc.start}); a recorded file is UTF-8 text") from None


def _size(limit: int) -> str:
    if limit % MIB == 0:
        return f"{limit // MIB} MiB"
    if limit % KIB == 0:
        return f"{limit // KIB} KiB"
    return f"{limit} bytes"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_proc_value(path: Path, text: str) -> None:
    """Write ``text`` into an existing kernel attribute (``/proc/irq/N/smp_affinity``):
    never creates, truncates or follows a symbolic link. Raises ``OSError``."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _write_all(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def open_staging_dir(folder: Path, *, force: bool) -> tuple[int, Path]:
    """Create a fresh, uniquely named temporary folder next to ``folder`` (mode 0755 less
    the umask) and return its descriptor (caller closes it) and path.

    ``folder``'s parents are created; an existing ``folder`` must be a folder, not a symbolic
    link, and empty unless ``force`` (``TopologyError``). Fill it with ``write_new_file``,
    then ``publish_staging_dir``, or ``discard_staging_dir`` on failure. Raises ``OSError``.
    """
    check_path_text(str(folder), "folder")
    folder.parent.mkdir(parents=True, exist_ok=True)
    check_output_dir(folder, force=force)
    # NAME_MAX is 255 bytes: a long folder name is shortened (a random part keeps it unique).
    prefix = os.fsencode(folder.name)[:200].decode(errors="ignore")
    staging = folder.parent / f".{prefix}.{secrets.token_hex(8)}.tmp"
    os.mkdir(staging, 0o755)
    try:
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        discard_staging_dir(staging)
        raise
    return fd, staging


def publish_staging_dir(staging_fd: int, staging: Path, folder: Path, names: list[str], *,
                        force: bool) -> None:
    """Make the staged files ``names`` the content of ``folder``.

    A missing ``folder`` becomes the staging folder by one ``rename`` (all files appear at
    once). An existing one (a folder, never a symbolic link; empty unless ``force``) gets
    each file by one ``rename``, after checking that no name is a folder there, and the
    empty staging folder is removed. Raises ``TopologyError`` or ``OSError``.
    """
    try:
        os.lstat(folder)
    except FileNotFoundError:
        try:
            os.rename(staging, folder)
            return
        except OSError as exc:  # created meanwhile, not empty: filled like an existing one
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            mode = os.lstat(folder).st_mode
            raise TopologyError(f"{folder} is a {_kind(mode)}, not a folder; refused") from None
        raise
    try:
        entries = os.listdir(fd)
        if entries and not force:
            raise _not_empty(folder, len(entries))
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR),
                                            str(folder / name))
        for name in names:
            os.replace(name, name, src_dir_fd=staging_fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(staging)


def discard_staging_dir(staging: Path) -> None:
    """Remove a staging folder and what it holds (never following a symbolic link); errors
    are ignored, as this runs while another error is being raised."""
    shutil.rmtree(staging, ignore_errors=True)


def _not_empty(folder: Path, count: int) -> TopologyError:
    return TopologyError(f"{folder} is not empty ({count} entries); pass --force (force=True) "
                         "to replace the recorded files in it")


def check_output_dir(folder: Path, *, force: bool) -> None:
    """Refuse early (before any slow work) what ``publish_staging_dir`` would refuse for an
    existing ``folder``; it checks again when publishing."""
    check_path_text(str(folder), "folder")
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise TopologyError(f"{folder} is a {_kind(mode)}, not a folder; refused")
    if not force:
        count = len(os.listdir(folder))
        if count:
            raise _not_empty(folder, count)


def write_new_file(dir_fd: int, name: str, text: str) -> None:
    """Create ``name`` in the directory ``dir_fd`` with ``text``.

    The data goes to a fresh temporary file (``O_EXCL | O_NOFOLLOW``) that is then renamed
    over ``name``: an existing ``name`` (a symbolic link, a FIFO, a file) is replaced as a
    directory entry, never opened or followed. Raises ``OSError``.
    """
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    temp = f".{name}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o644, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, text.encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise

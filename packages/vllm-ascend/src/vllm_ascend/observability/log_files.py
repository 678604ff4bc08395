"""The per-process log file: size-rotated, never through a symlink, bounded on disk.

Files are ``vllm_ascend_<YYYYmmdd_HHMMSS>_<pid>.log``, then ``..._002.log``, ``..._003.log``.
The caps hold whatever happens to the directory: the size of the open file is read from its
descriptor, so a deleted file or directory is noticed and the file is opened again (the
directory made again, mode 0700). A file that cannot be opened or written (no permission, a
symlink or a FIFO planted at its name, a directory someone else can write, a full disk) turns
file logging off with one warning on stderr; the records still reach vLLM's and vllm-ascend's
console handlers. Retry rule: the first record at least ``RETRY_SECONDS`` after the last
failure opens the file again and writes to it; when that write succeeds the file is back (no
second warning while it keeps failing). The handler never raises into a logging call.
Retention covers earlier processes too: all
``vllm_ascend_*.log`` files of the directory together stay under ``max_dir_bytes``, oldest
removed first.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from vllm_ascend.runtime.trusted_paths import UntrustedPathError, make_private_dir

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_FILES = 5
DEFAULT_MAX_DIR_BYTES = 500 * 1024 * 1024
RETRY_SECONDS = 30.0
PATTERN = "vllm_ascend_*.log"
_OPEN_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
               | os.O_CLOEXEC)


def open_log_file(path: Path) -> IO[str]:
    """Open ``path`` for appending (mode 0600) without following a symlink or blocking on a
    FIFO; refuse anything but a regular file owned by this user."""
    fd = os.open(path, _OPEN_FLAGS, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPathError(f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise UntrustedPathError(f"{path} is owned by uid {st.st_uid}, not by this user")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")


def prune_dir(log_dir: Path, max_dir_bytes: int, keep: Path | None = None) -> list[Path]:
    """Delete the oldest ``vllm_ascend_*.log`` files (any process) until the rest fit in
    ``max_dir_bytes``; ``keep`` is never deleted. Returns what was deleted."""
    files = []
    for path in log_dir.glob(PATTERN):
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            files.append((st.st_mtime, path, st.st_size))
    total = sum(size for _, _, size in files)
    deleted = []
    for _, path, size in sorted(files):
        if total <= max_dir_bytes:
            break
        if path == keep:
            continue
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        deleted.append(path)
    return deleted


class RotatingAscendFileHandler(logging.Handler):
    """Per-process log file rotated by size, at most ``max_files`` files of this process and
    ``max_dir_bytes`` for all processes' files in the directory."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
        *,
        max_dir_bytes: int = DEFAULT_MAX_DIR_BYTES,
        now: _dt.datetime | None = None,
        pid: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes <= 0 or max_files <= 0 or max_dir_bytes < max_bytes:
            raise ValueError(
                f"max_bytes={max_bytes} and max_files={max_files} must both be positive and "
                f"max_dir_bytes={max_dir_bytes} at least max_bytes"
            )
        super().__init__()
        self.log_dir = Path(log_dir)
        self.max_bytes, self.max_files, self.max_dir_bytes = max_bytes, max_files, max_dir_bytes
        stamp = (now or _dt.datetime.now()).strftime("%Y%m%d_%H%M%S")
        self.base = f"vllm_ascend_{stamp}_{pid if pid is not None else os.getpid()}"
        self.sequence = 1
        self.files: list[Path] = []
        self.failure: str | None = None
        self._clock = clock
        self._retry_at = 0.0
        self._stream: IO[str] | None = None
        self._open()  # errors reach the caller: configure_file_logging falls back to stderr

    @property
    def current_path(self) -> Path:
        suffix = "" if self.sequence == 1 else f"_{self.sequence:03d}"
        return self.log_dir / f"{self.base}{suffix}.log"

    def _open(self) -> None:
        make_private_dir(self.log_dir)
        path = self.current_path
        self._stream = open_log_file(path)
        if not self.files or self.files[-1] != path:
            self.files.append(path)
        while len(self.files) > self.max_files:
            oldest = self.files.pop(0)
            oldest.unlink(missing_ok=True)
        prune_dir(self.log_dir, self.max_dir_bytes, keep=path)

    def close_stream(self) -> None:
        """Close the file; never raises (text that cannot be flushed, e.g. on a full disk, is
        lost with it), and the handler holds no closed stream afterwards."""
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()

    def _ready_stream(self) -> IO[str] | None:
        """The stream to write the next record to, reopened or rotated as needed."""
        if self.failure is not None:
            if self._clock() < self._retry_at:
                return None
            self.close_stream()
            self._open()  # ``failure`` is cleared once a write through it succeeds
            return self._stream
        if self._stream is None:  # closed by vLLM's dictConfig while still attached: reopen
            self._open()
        assert self._stream is not None
        st = os.fstat(self._stream.fileno())
        if st.st_nlink == 0:  # deleted under us (or its directory): a new file in its place
            self.close_stream()
            self._open()
        elif st.st_size >= self.max_bytes:
            self.close_stream()
            self.sequence += 1
            self._open()
        return self._stream

    def _fail(self, exc: Exception) -> None:
        self.close_stream()
        self._retry_at = self._clock() + RETRY_SECONDS
        reason = str(exc) or type(exc).__name__
        if self.failure is None:
            with contextlib.suppress(AttributeError, OSError, ValueError):  # no stderr either
                sys.stderr.write(
                    f"WARNING vllm-ascend: cannot write the log file {self.current_path} "
                    f"({reason}); logging to the console only, retrying every "
                    f"{RETRY_SECONDS:.0f} s\n")
        self.failure = reason

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record) + "\n"
        except Exception:
            self.handleError(record)
            return
        self.acquire()
        try:
            stream = self._ready_stream()
            if stream is not None:
                stream.write(text)
                stream.flush()
                self.failure = None
        except (OSError, ValueError) as exc:  # ValueError: a stream closed under us
            self._fail(exc)
        except Exception:
            self.handleError(record)
        finally:
            self.release()

    def close(self) -> None:
        self.close_stream()
        super().close()


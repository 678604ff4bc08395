"""The per-process log file: size rotation, opened without following a symlink, capped per
directory; failures fall back to the console and retry (the package README, "Trust and files").
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import logging
import logging.handlers
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from vllm_ascend.base.trusted_paths import UntrustedPathError, make_private_dir

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_FILES = 5
DEFAULT_MAX_DIR_BYTES = 500 * 1024 * 1024
RETRY_SECONDS = 30.0
PATTERN = "vllm_ascend_*.log*"
_OPEN_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
               | os.O_CLOEXEC)


def prune_dir(log_dir: Path, max_dir_bytes: int, keep: Path | None = None) -> list[Path]:
    """Delete the oldest ``vllm_ascend_*.log*`` files (not ``keep``) to fit ``max_dir_bytes``."""
    files = []
    for path in log_dir.glob(PATTERN):
        with contextlib.suppress(OSError):
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                files.append((st.st_mtime, path, st.st_size))
    total = sum(size for _, _, size in files)
    deleted = []
    for _, path, size in sorted(files):
        if total <= max_dir_bytes:
            break
        if path == keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
            deleted.append(path)
    return deleted


class RotatingAscendFileHandler(logging.handlers.RotatingFileHandler):
    """Per-process log file rotated by size, capped per process and for the whole directory."""

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
        self.log_dir = Path(log_dir)
        self.max_dir_bytes = max_dir_bytes
        self.failure: str | None = None
        self._failed_now = False
        self._clock = clock
        self._retry_at = 0.0
        stamp = (now or _dt.datetime.now()).strftime("%Y%m%d_%H%M%S")
        name = f"vllm_ascend_{stamp}_{pid if pid is not None else os.getpid()}.log"
        # Opens the file: errors reach the caller (configure_file_logging falls back to stderr).
        super().__init__(self.log_dir / name, maxBytes=max_bytes, backupCount=max_files - 1,
                         encoding="utf-8")

    @property
    def current_path(self) -> Path:
        return Path(self.baseFilename)

    def _open(self) -> io.TextIOWrapper:
        """Append to the file (0600): regular files only, never through a symlink or a FIFO."""
        make_private_dir(self.log_dir)
        fd = os.open(self.baseFilename, _OPEN_FLAGS, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UntrustedPathError(f"{self.baseFilename} is not a regular file")
        prune_dir(self.log_dir, self.max_dir_bytes, keep=self.current_path)
        return io.TextIOWrapper(os.fdopen(fd, "ab"), encoding="utf-8")

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        if self.stream is not None and os.fstat(self.stream.fileno()).st_nlink == 0:
            self._close_stream()  # deleted under us (or its directory): a new file in its place
        return bool(super().shouldRollover(record))

    def doRollover(self) -> None:
        if self.backupCount == 0:  # the stdlib would append to the full file again
            self._close_stream()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.baseFilename)
        super().doRollover()

    def _close_stream(self) -> None:
        """Close the file, never raising (unflushed text is lost with it)."""
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is not None and self._clock() < self._retry_at:
            return
        self._failed_now = False
        super().emit(record)
        if not self._failed_now:
            self.failure = None

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, (OSError, ValueError)):  # ValueError: a stream closed under us
            super().handleError(record)
            return
        self._failed_now = True
        self._close_stream()
        self._retry_at = self._clock() + RETRY_SECONDS
        reason = str(exc) or type(exc).__name__
        if self.failure is None:
            with contextlib.suppress(AttributeError, OSError, ValueError):  # no stderr either
                sys.stderr.write(
                    f"WARNING vllm-ascend: cannot write the log file {self.current_path} "
                    f"({reason}); logging to the console only, retrying every "
                    f"{RETRY_SECONDS:.0f} s\n")
        self.failure = reason

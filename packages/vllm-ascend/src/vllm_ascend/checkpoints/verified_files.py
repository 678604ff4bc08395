"""A record of files whose sha256 this user computed, so an unchanged file is not hashed again."""
# Unchanged: same size, mtime_ns, ctime_ns, inode and device; only files older than the hash's start
# by SETTLE_NS are recorded, since file times come from a coarse clock.

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Final

RECORD_NAME: Final = ".verified-sha256.json"
RECORD_FORMAT: Final = 1
_RECORD_LIMIT: Final = 1 << 20
# Entries kept: a few checkpoints' files and their sources; older entries are dropped.
_MAX_ENTRIES: Final = 256
# Well above the file-time clock's tick (at most 10 ms with HZ=100).
SETTLE_NS: Final = 100_000_000


def file_identity(path: Path) -> list[int]:
    """(size, mtime_ns, ctime_ns, inode, device) of the file itself (symlinks not followed)."""
    st = os.stat(path, follow_symlinks=False)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _read_record(path: Path) -> dict[str, Any]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                or st.st_mode & 0o022 or st.st_size > _RECORD_LIMIT):
            return {}
        data = json.loads(os.read(fd, _RECORD_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


class VerifiedFiles:
    """sha256 of files, taken from the record in ``directory`` when a file is unchanged."""

    def __init__(self, directory: Path, hasher: Any) -> None:
        self.path = Path(directory) / RECORD_NAME
        self._hasher = hasher
        self._files = _read_record(self.path)
        self._dirty = False
        self.hashed: list[str] = []  # the files this object actually read (for tests, logs)

    def sha256(self, path: Path) -> str:
        """The file's sha256: recorded when unchanged, else computed (recorded on :meth:`save`)."""
        key = os.path.abspath(path)
        identity = file_identity(path)
        known = self._files.get(key)
        if (isinstance(known, dict) and known.get("identity") == identity
                and isinstance(known.get("sha256"), str)):
            return str(known["sha256"])
        start = time.time_ns()
        digest = str(self._hasher(path))
        settled = max(identity[1], identity[2]) < start - SETTLE_NS
        if settled and file_identity(path) == identity:  # and not changed while it was read
            self._files.pop(key, None)
            self._files[key] = {"identity": identity, "sha256": digest}
            self._dirty = True
        self.hashed.append(key)
        return digest

    def save(self) -> None:
        """Write the record (atomically, 0600) if it changed; a failure only costs hashing again."""
        if not self._dirty:
            return
        files = dict(list(self._files.items())[-_MAX_ENTRIES:])
        text = json.dumps({"format": RECORD_FORMAT, "files": files}, sort_keys=False)
        with contextlib.suppress(OSError):
            fd, staging = tempfile.mkstemp(prefix=".verified.", suffix=".tmp",
                                           dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                os.replace(staging, self.path)
            except OSError:
                os.unlink(staging)
                raise
        self._dirty = False

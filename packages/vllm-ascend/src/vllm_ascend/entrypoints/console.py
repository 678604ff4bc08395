"""Writing a command's result to stdout, where stdout may be closed, full or narrow."""

from __future__ import annotations

import errno
import os
import sys

# sysexits.h's EX_IOERR: the result was complete but the disk behind stdout had no room for it.
EXIT_NO_SPACE = 74
EXIT_OUTPUT_FAILED = 1


def guard_standard_streams() -> None:
    """Put ``/dev/null`` on a closed descriptor 0, 1 or 2 (``sys.stdout`` stays None)."""
    # So no file opened later takes that number and receives a child process's output.
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            spare = os.open(os.devnull, os.O_RDWR)
            if spare != fd:
                os.dup2(spare, fd)
                os.close(spare)


def write_stdout(text: str, prog: str) -> int:
    """Write ``text`` to stdout and flush; the exit status (0, 1, or :data:`EXIT_NO_SPACE`).

    Unencodable characters go out as their bytes or escaped; a failure is one stderr line.
    """
    stream = sys.stdout
    if stream is None:
        _error(prog, "cannot write to stdout: stdout is closed")
        return EXIT_OUTPUT_FAILED
    try:
        buffer = getattr(stream, "buffer", None)
        if buffer is None:
            stream.write(text)
        else:
            stream.flush()
            buffer.write(encode_for(text, getattr(stream, "encoding", None) or "utf-8"))
        stream.flush()
        return 0
    except OSError as exc:
        path = stdout_path()
        _detach_stdout()
        if exc.errno == errno.ENOSPC:
            _error(prog, f"no space left on device writing {path}")
            return EXIT_NO_SPACE
        _error(prog, f"cannot write to stdout: {exc.strerror or exc}")
        return EXIT_OUTPUT_FAILED


def encode_for(text: str, encoding: str) -> bytes:
    """``text`` in ``encoding``: surrogate escapes back to bytes where possible, else escaped."""
    try:
        return text.encode(encoding, "surrogateescape")
    except UnicodeEncodeError:
        return text.encode(encoding, "backslashreplace")
    except LookupError:
        return text.encode("utf-8", "backslashreplace")


def stdout_path() -> str:
    """The file behind descriptor 1 as the kernel names it, or ``stdout`` where it cannot."""
    try:
        return os.fsdecode(os.readlink("/proc/self/fd/1"))
    except OSError:
        return "stdout"


def _error(prog: str, message: str) -> None:
    if sys.stderr is not None:
        print(f"{prog}: error: {message}", file=sys.stderr)


def _detach_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass

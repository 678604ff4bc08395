"""Writing a command's result to stdout, where stdout may be closed, full or narrow."""

from __future__ import annotations

import errno
import os
import sys

# sysexits.h's EX_IOERR: the result was complete but the disk behind stdout had no room for it.
EXIT_NO_SPACE = 74
EXIT_OUTPUT_FAILED = 1


def guard_standard_streams() -> None:
    """Put ``/dev/null`` on a closed descriptor 0, 1 or 2 (``cmd >&-``), so that no file the
    command opens later takes that number and receives a child process's output. ``sys.stdout``
    stays None, so :func:`write_stdout` still knows that stdout was closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            spare = os.open(os.devnull, os.O_RDWR)
            if spare != fd:
                os.dup2(spare, fd)
                os.close(spare)


def write_stdout(text: str, prog: str) -> int:
    """Write ``text`` to stdout and flush it; returns the exit status (0 when written).

    A character stdout's encoding cannot carry is written as the bytes it came from (a path's
    undecodable byte) or as a backslash escape, never a UnicodeEncodeError. A stdout that cannot
    take the text is one error line on stderr: a closed stdout or a failed write is status 1,
    a full disk (ENOSPC) says so with the file's path and status :data:`EXIT_NO_SPACE`.
    stdout is then pointed at ``/dev/null`` so the interpreter's flush at exit cannot fail again.
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
    """``text`` in ``encoding``: surrogate escapes back to their bytes where that encoding takes
    them (the truth of a path), else anything the encoding lacks as a backslash escape."""
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

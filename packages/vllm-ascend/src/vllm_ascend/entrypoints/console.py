"""Writing a command's result to stdout, where stdout may refuse it."""

from __future__ import annotations

import os
import sys


def write_stdout(text: str, prog: str) -> bool:
    """Write ``text`` to stdout and flush it; a stdout that cannot take it (a full disk,
    ``/dev/full``, a closed pipe) is one error line on stderr and False. stdout is then pointed
    at ``/dev/null`` so the interpreter's own flush at exit does not fail again."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    except OSError as exc:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        print(f"{prog}: error: cannot write to stdout: {exc.strerror or exc}", file=sys.stderr)
        return False

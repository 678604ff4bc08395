"""Stand-in executables for tests that run external commands (pair with the ``no_commands``
fixture, which leaves only an empty folder on PATH)."""

from __future__ import annotations

import sys
from pathlib import Path


def stand_in_command(bin_dir: Path, name: str, body: str) -> Path:
    """A stand-in command that logs its arguments to ``<name>.log`` and runs ``body``."""
    log = bin_dir / f"{name}.log"
    script = bin_dir / name
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n{body}\n")
    script.chmod(0o755)
    return log

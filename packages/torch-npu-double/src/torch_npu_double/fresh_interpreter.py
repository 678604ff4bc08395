"""Code run in a fresh interpreter, for tests of process-wide state (the emulated device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

# A prelude for contract tests: ``attempt(name, fn)`` stores "ok" or the refusal's text in ``out``.
ATTEMPT = """
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except (RuntimeError, NotImplementedError) as e:
        out[name] = str(e)
"""


def run_json(code: str, env: Mapping[str, str], timeout: float = 600.0, *,
             prelude: str = "") -> Any:
    """``prelude`` then ``code`` (each dedented) in a fresh interpreter with ``env`` added to
    this process's environment less its ``VLLM_ASCEND_EMULATED*`` variables; the JSON of the
    last line it prints. AssertionError with the end of its stderr when it fails."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_EMULATED")}
    full.update(env)
    source = textwrap.dedent(prelude) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", source], env=full,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

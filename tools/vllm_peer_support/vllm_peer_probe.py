"""pytest plugin (``-p vllm_peer_probe``) for ``tools/vllm_peer_tests.py``: at the end of the
session, writes the class name of vLLM's current platform to the file named by
``VLLM_PEER_PLATFORM_FILE``, so the tool can check each side ran on the platform it meant."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PLATFORM_FILE_ENV = "VLLM_PEER_PLATFORM_FILE"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Record ``type(vllm.platforms.current_platform).__name__``."""
    target = os.environ.get(PLATFORM_FILE_ENV)
    if not target:
        return
    from vllm.platforms import current_platform

    Path(target).write_text(type(current_platform).__name__, encoding="utf-8")

"""Building the one-pass C loops: where the cache is, and how a compiler run is judged.

The compiler is the system one (``cc``); misbehaving compilers are small shell scripts around
it. Expected results come from the documented contract: a compiler that fails, whatever it
wrote, gives no library; its output never reaches the terminal; a hung compile is abandoned.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from ascend_kernels import native_loops


def test_cache_root_is_under_xdg_cache_home_else_home_dot_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native_loops.cache_root() == tmp_path / "xdg" / "ascend_kernels"
    for unset in ("", None):  # an empty XDG_CACHE_HOME counts as unset
        if unset is None:
            monkeypatch.delenv("XDG_CACHE_HOME")
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", unset)
        assert native_loops.cache_root() == tmp_path / "home" / ".cache" / "ascend_kernels"


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
    return str(path)


def _real_cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None
    return cc


def test_builds_in_the_cache_directory_not_the_system_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no-such-tmp"))
    loop = native_loops.NativeLoops(tmp_path / "cache", _real_cc()).muls_add_bf16()
    assert loop is not None
    x, y = torch.tensor([1.0, -2.0]).bfloat16(), torch.tensor([0.5, 0.25]).bfloat16()
    out = torch.empty_like(x)
    loop(x, y, out, 2.0)
    assert out.tolist() == [2.5, -3.75]  # 1 * 2 + 0.5, -2 * 2 + 0.25: exact in bfloat16


def test_a_compiler_that_fails_gives_no_library_even_if_it_wrote_one_and_stays_quiet(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Builds the library for real, then complains on both streams and exits 1.
    failing = _script(tmp_path / "failing-cc",
                      f'{_real_cc()} "$@"\necho "cc: out of cheese"\n'
                      'echo "cc: fatal error" >&2\nexit 1')
    loops = native_loops.NativeLoops(tmp_path / "cache", failing)
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        assert loops.muls_add_bf16() is None
    assert "returned non-zero exit status 1" in caplog.records[-1].getMessage()
    streams = capfd.readouterr()
    assert "cc:" not in streams.out and "cc:" not in streams.err


def test_a_hung_compile_is_abandoned_after_two_minutes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_run = subprocess.run

    def run(command: list[str], *args: Any, **kwargs: Any) -> Any:
        if "--version" in command:
            return real_run(command, *args, **kwargs)
        # A compile that never ends: only a timeout gets the caller out (no real waiting).
        assert kwargs.get("timeout") is not None, "the compile has no time limit"
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(subprocess, "run", run)
    loops = native_loops.NativeLoops(tmp_path / "cache", _real_cc())
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        assert loops.muls_add_bf16() is None
    assert "timed out after 120 seconds" in caplog.records[-1].getMessage()

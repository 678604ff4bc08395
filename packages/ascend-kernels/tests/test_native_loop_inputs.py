"""What the native-loop builder takes from its surroundings: compiler lookup and identity,
the library name, the cache directory check, the private directory mode, the C loop's values."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from ascend_kernels import native_cache, native_loops


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _fake_compiler(path: Path, version_lines: str) -> str:
    """A compiler whose ``--version`` prints ``version_lines`` and exits 3; other calls fail."""
    return _script(path, f'if [ "$1" = "--version" ]; then printf \'{version_lines}\'; exit 3; fi\n'
                         'echo "unexpected arguments: $*"; exit 1')


@pytest.mark.parametrize("name", ["gcc", "clang"])
def test_compiler_found_by_its_plain_name_on_path(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler = _script(tmp_path / name, "exit 0")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert native_loops._find_compiler() == compiler


def test_compiler_id_is_the_first_line_of_version_even_on_a_nonzero_exit(tmp_path: Path) -> None:
    compiler = _fake_compiler(tmp_path / "cc", "fake cc 1.0\\nsecond line\\nthird line\\n")
    assert native_loops._compiler_id(compiler) == b"fake cc 1.0"


def test_compiler_version_query_has_a_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def run(command: list[str], *args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        # Records the call instead of running it: a hung `--version` would block forever.
        return subprocess.CompletedProcess(command, 0, b"cc 9\n", b"")

    monkeypatch.setattr(subprocess, "run", run)
    assert native_loops._compiler_id("/bin/cc") == b"cc 9"
    assert seen["timeout"] is not None and 0 < seen["timeout"] <= 30


def test_an_explicit_compiler_is_used_as_given(tmp_path: Path) -> None:
    loops = native_loops.NativeLoops(tmp_path, compiler="/opt/x/bin/mycc")
    assert loops.compiler == "/opt/x/bin/mycc"


def test_library_name_is_keyed_by_the_compiler_and_has_a_16_hex_key(tmp_path: Path) -> None:
    one = _fake_compiler(tmp_path / "cc1", "fake cc 1.0\\n")
    two = _fake_compiler(tmp_path / "cc2", "fake cc 2.0\\n")
    path_one = native_loops.NativeLoops(tmp_path, one).library_path("muls_add_bf16.c")
    path_two = native_loops.NativeLoops(tmp_path, two).library_path("muls_add_bf16.c")
    again = native_loops.NativeLoops(tmp_path, one).library_path("muls_add_bf16.c")
    assert re.fullmatch(r"muls_add_bf16-[0-9a-f]{16}\.so", path_one.name)
    assert path_one != path_two and path_one == again


def test_an_untrusted_cache_directory_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    loops = native_loops.NativeLoops(cache, compiler="/nonexistent/cc")
    with caplog.at_level(logging.WARNING, logger="ascend_kernels.native_loops"):
        assert loops._cache_directory() is None
        assert loops._cache_directory() is None
    warnings = [r for r in caplog.records if "not using the native-loop cache" in r.getMessage()]
    assert len(warnings) == 1


def test_private_directories_are_never_open_to_others_even_before_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    real_chmod = os.chmod

    def chmod(path: Any, mode: int) -> None:
        modes.append(stat.S_IMODE(os.lstat(path).st_mode))
        real_chmod(path, mode)

    monkeypatch.setattr(os, "chmod", chmod)
    old_umask = os.umask(0)
    try:
        native_cache.make_private_directory(tmp_path / "a" / "b")
    finally:
        os.umask(old_umask)
    assert modes == [0o700, 0o700]
    assert stat.S_IMODE(os.lstat(tmp_path / "a" / "b").st_mode) == 0o700


def test_root_owned_ancestors_are_trusted(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    euid = os.geteuid()
    if euid == 0:  # as root, the directory must belong to someone else to tell root apart
        euid = 12345
        os.chown(directory, euid, -1)
    assert all(os.stat(p).st_uid in (os.geteuid(), 0) for p in directory.parents)
    assert os.stat("/").st_uid == 0
    assert native_cache.directory_problem(directory, euid) is None


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@needs_cc
def test_declared_return_type_is_set_on_the_function(tmp_path: Path) -> None:
    kernel = native_loops.NativeKernel(
        source="muls_add_bf16.c", symbol="ascend_muls_add_bf16",
        argtypes=native_loops.MULS_ADD_BF16.argtypes, restype=ctypes.c_int32,
    )
    fn = native_loops.NativeLoops(tmp_path / "cache", shutil.which("cc")).function(kernel)
    assert fn is not None and fn.restype is ctypes.c_int32


@needs_cc
def test_the_c_loop_writes_bf16_of_float32_product_plus_y(tmp_path: Path) -> None:
    loop = native_loops.NativeLoops(tmp_path / "cache", shutil.which("cc")).muls_add_bf16()
    assert loop is not None
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, generator=g).bfloat16()
    y = torch.randn(37, generator=g).bfloat16()
    out = torch.empty_like(x)
    loop(x, y, out, 0.3)
    scale = torch.tensor(0.3, dtype=torch.float32)
    assert torch.equal(out, (x.float() * scale + y.float()).bfloat16())

"""The native-loop cache loads only libraries this user built and recorded.

Planted libraries carry a constructor that writes a marker file when the library is loaded,
so "not loaded" is observed directly: the marker must not appear. Files owned by another user
are made with ``os.chown`` to uid 65534 (the suite runs as root here). Every case also checks
that ``ascend::muls_add`` still gives the single-rounding bfloat16 result of the torch path.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ascend_kernels import native_cache, native_loops

A = torch.ops.ascend
OTHER_UID = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _definition(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return (x.float() * scale + y.float()).to(x.dtype)


def _bf16_pair() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(7, 333, generator=g) * 3).bfloat16()
    return x, torch.randn(7, 333, generator=g).bfloat16()


def _planted_library(directory: Path, marker: Path, *, with_symbol: bool = True) -> bytes:
    """A library whose constructor writes ``marker`` (and whose loop writes zeros)."""
    cc = native_loops._find_compiler()
    assert cc is not None, "these tests need the system C compiler"
    body = (
        "void ascend_muls_add_bf16(const uint16_t *x, const uint16_t *y, uint16_t *out,"
        " int64_t n, float s) { for (int64_t i = 0; i < n; ++i) out[i] = 0; }\n"
        if with_symbol
        else "int unrelated_symbol(void) { return 1; }\n"
    )
    source = directory / ("planted.c" if with_symbol else "planted_nosym.c")
    source.write_text(
        "#include <stdint.h>\n#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("loaded", f); fclose(f); }}\n'
        "}\n" + body
    )
    output = source.with_suffix(".so")
    subprocess.run([cc, "-shared", "-fPIC", str(source), "-o", str(output)], check=True)
    data = output.read_bytes()
    output.unlink()
    return data


def _plant(path: Path, data: bytes, *, uid: int | None = None, mode: int = 0o700) -> None:
    path.write_bytes(data)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)


def _record_for(library: Path) -> Path:
    return library.with_suffix(".sha256")


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$XDG_CACHE_HOME`` in a private temporary directory; fresh default loops around it."""
    base = tmp_path / "xdg"
    base.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    native_loops.default_loops.cache_clear()
    yield base
    native_loops.default_loops.cache_clear()


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "planted-library-was-loaded"


def _target(root: Path) -> Path:
    return native_loops.NativeLoops(root).library_path(native_loops.MULS_ADD_BF16.source)


def _assert_torch_result_and_marker_absent(marker: Path) -> None:
    x, y = _bf16_pair()
    assert torch.equal(A.muls_add(x, y, 0.37), _definition(x, y, 0.37))
    assert not marker.exists(), "the planted library was loaded"


def _assert_rebuilt_by_us(library: Path) -> None:
    info = library.stat()
    assert info.st_uid == os.geteuid() and not info.st_mode & 0o022
    recorded = _record_for(library).read_text().strip()
    assert recorded == native_cache.sha256_hex(library.read_bytes())


@needs_root
def test_library_planted_by_another_user_is_replaced_not_loaded(
    xdg: Path, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = xdg / "ascend_kernels"
    root.mkdir(mode=0o700)
    target = _target(root)
    planted = _planted_library(xdg.parent, marker)
    _plant(target, planted, uid=OTHER_UID)
    _plant(_record_for(target), native_cache.sha256_hex(planted).encode(), uid=OTHER_UID,
           mode=0o600)
    with caplog.at_level(logging.WARNING, logger="ascend_kernels.native_loops"):
        _assert_torch_result_and_marker_absent(marker)
    assert native_loops.default_loops().muls_add_bf16() is not None
    assert any(f"uid {OTHER_UID}" in r.getMessage() for r in caplog.records)
    _assert_rebuilt_by_us(target)


@needs_root
def test_cache_root_owned_by_another_user_is_refused_with_one_warning(
    xdg: Path, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = xdg / "ascend_kernels"
    root.mkdir(mode=0o755)
    target = _target(root)
    planted = _planted_library(xdg.parent, marker)
    _plant(target, planted, uid=OTHER_UID)
    _plant(_record_for(target), native_cache.sha256_hex(planted).encode(), uid=OTHER_UID)
    os.chown(root, OTHER_UID, OTHER_UID)
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        _assert_torch_result_and_marker_absent(marker)
        # Built privately: the fast loop is available, and nothing was written into root.
        assert native_loops.default_loops().muls_add_bf16() is not None
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert f"owned by uid {OTHER_UID}" in caplog.records[0].getMessage()
    assert sorted(p.name for p in root.iterdir()) == sorted([target.name, _record_for(target).name])


@pytest.mark.parametrize(
    ("mode", "trusted"),
    [(0o777, False), (0o770, False), (0o720, False), (0o702, False), (0o755, True),
     (0o750, True), (0o700, True)],
    ids=lambda v: oct(v) if type(v) is int else ("trusted" if v else "refused"),
)
def test_cache_root_writable_by_group_or_others_is_refused(
    xdg: Path, marker: Path, mode: int, trusted: bool
) -> None:
    root = xdg / "ascend_kernels"
    root.mkdir()
    os.chmod(root, mode)
    target = _target(root)
    if trusted:
        # A trusted root is used: the library is built there.
        assert native_loops.default_loops().muls_add_bf16() is not None
        _assert_rebuilt_by_us(target)
        return
    # Someone who could write the directory placed a library with a matching record.
    planted = _planted_library(xdg.parent, marker)
    _plant(target, planted)
    _plant(_record_for(target), native_cache.sha256_hex(planted).encode(), mode=0o600)
    _assert_torch_result_and_marker_absent(marker)
    assert native_loops.default_loops().muls_add_bf16() is not None
    assert target.read_bytes() == planted  # untouched: the refused directory is not written


def test_symlinked_cache_root_is_refused(xdg: Path, marker: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    target = _target(elsewhere)
    planted = _planted_library(xdg.parent, marker)
    _plant(target, planted)
    _plant(_record_for(target), native_cache.sha256_hex(planted).encode(), mode=0o600)
    (xdg / "ascend_kernels").symlink_to(elsewhere)
    _assert_torch_result_and_marker_absent(marker)
    assert native_loops.default_loops().muls_add_bf16() is not None


@pytest.mark.parametrize(
    ("mode", "trusted"),
    [(0o777, False), (0o1777, True), (0o755, True)],
    ids=lambda v: oct(v) if type(v) is int else ("trusted" if v else "refused"),
)
def test_ancestor_writable_by_others_needs_the_sticky_bit(
    tmp_path: Path, mode: int, trusted: bool
) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    os.chmod(parent, mode)
    root = parent / "cache"
    root.mkdir(mode=0o700)
    problem = native_cache.directory_problem(root, os.geteuid())
    assert (problem is None) == trusted
    if not trusted:
        assert problem is not None and "sticky" in problem


@needs_root
def test_ancestor_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o755)
    root = parent / "cache"
    root.mkdir(mode=0o700)
    assert native_cache.directory_problem(root, os.geteuid()) is None
    os.chown(parent, OTHER_UID, OTHER_UID)
    problem = native_cache.directory_problem(root, os.geteuid())
    assert problem is not None and f"owned by uid {OTHER_UID}" in problem


@pytest.mark.parametrize("record", ["missing", "wrong"])
def test_library_that_does_not_match_its_record_is_rebuilt(
    xdg: Path, marker: Path, record: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = xdg / "ascend_kernels"
    root.mkdir(mode=0o700)
    target = _target(root)
    _plant(target, _planted_library(xdg.parent, marker))
    if record == "wrong":
        _plant(_record_for(target), b"0" * 64 + b"\n", mode=0o600)
    with caplog.at_level(logging.WARNING, logger="ascend_kernels.native_loops"):
        _assert_torch_result_and_marker_absent(marker)
    assert native_loops.default_loops().muls_add_bf16() is not None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [f"rebuilding {target}"]
    _assert_rebuilt_by_us(target)


@needs_root
@pytest.mark.parametrize("problem", ["foreign", "shared-writable", "symlink"])
def test_untrusted_record_is_not_believed(
    xdg: Path, marker: Path, problem: str, tmp_path: Path
) -> None:
    root = xdg / "ascend_kernels"
    root.mkdir(mode=0o700)
    target = _target(root)
    planted = _planted_library(xdg.parent, marker)
    _plant(target, planted)
    digest = native_cache.sha256_hex(planted).encode()
    record = _record_for(target)
    if problem == "foreign":
        _plant(record, digest, uid=OTHER_UID, mode=0o600)
    elif problem == "shared-writable":
        _plant(record, digest, mode=0o666)
    else:
        _plant(tmp_path / "record", digest, mode=0o600)
        record.symlink_to(tmp_path / "record")
    _assert_torch_result_and_marker_absent(marker)
    _assert_rebuilt_by_us(target)


def test_symlinked_library_is_not_loaded(xdg: Path, marker: Path, tmp_path: Path) -> None:
    root = xdg / "ascend_kernels"
    root.mkdir(mode=0o700)
    target = _target(root)
    planted = _planted_library(xdg.parent, marker)
    _plant(tmp_path / "real.so", planted)
    target.symlink_to(tmp_path / "real.so")
    _plant(_record_for(target), native_cache.sha256_hex(planted).encode(), mode=0o600)
    _assert_torch_result_and_marker_absent(marker)
    assert not target.is_symlink()
    _assert_rebuilt_by_us(target)


def test_library_without_the_symbol_means_unavailable(
    xdg: Path, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Recorded as if this user had built it (e.g. a source whose function was renamed).
    root = xdg / "ascend_kernels"
    root.mkdir(mode=0o700)
    target = _target(root)
    library = _planted_library(xdg.parent, marker, with_symbol=False)
    _plant(target, library)
    _plant(_record_for(target), native_cache.sha256_hex(library).encode(), mode=0o600)
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        for _ in range(2):  # one log line, then the cached answer
            x, y = _bf16_pair()
            assert torch.equal(A.muls_add(x, y, -2.5), _definition(x, y, -2.5))
    assert native_loops.default_loops().muls_add_bf16() is None
    assert [r.getMessage() for r in caplog.records] == [
        "muls_add_bf16.c has no symbol ascend_muls_add_bf16; using torch paths"
    ]
    assert marker.exists()  # it was ours and verified, so it was loaded: only the symbol lacks


@pytest.mark.child_process
def test_truncated_library_is_rebuilt_without_crashing(xdg: Path) -> None:
    root = xdg / "ascend_kernels"
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    # Built in a child too: a library this process has mapped must not be truncated under it
    # (its pages past the new end raise SIGBUS when touched, e.g. at interpreter exit).
    build = (
        "from pathlib import Path\n"
        "from ascend_kernels import native_loops\n"
        f"assert native_loops.NativeLoops(Path({str(root)!r})).muls_add_bf16() is not None\n"
    )
    built = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True,
                           timeout=300, env=env)
    assert built.returncode == 0, built.stderr
    target = _target(root)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 3])  # the record still names the full library
    # A new process: loading a truncated ELF can raise SIGBUS, which would kill pytest itself.
    code = (
        "import torch, ascend_kernels\n"
        "from ascend_kernels import native_loops\n"
        "x = torch.arange(-40, 40).bfloat16(); y = torch.ones(80).bfloat16()\n"
        "out = torch.ops.ascend.muls_add(x, y, 0.37)\n"
        "assert torch.equal(out, (x.float() * 0.37 + y.float()).bfloat16())\n"
        "print(native_loops.default_loops().muls_add_bf16() is not None)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    assert target.read_bytes() == data
    _assert_rebuilt_by_us(target)


def test_fresh_cache_is_private_and_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "a" / "b" / "ascend_kernels"
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        assert native_loops.NativeLoops(root).muls_add_bf16() is not None
    assert caplog.records == []  # a first build is not worth a word
    for directory in (tmp_path / "a", tmp_path / "a" / "b", root):
        assert directory.stat().st_mode & 0o777 == 0o700
    target = _target(root)
    _assert_rebuilt_by_us(target)
    assert target.stat().st_mode & 0o777 == 0o700
    assert _record_for(target).stat().st_mode & 0o777 == 0o600


def test_private_fallback_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir(mode=0o700)
    monkeypatch.setattr("tempfile.tempdir", str(private_tmp))
    refused = tmp_path / "shared"
    refused.mkdir()
    os.chmod(refused, 0o777)
    loops = native_loops.NativeLoops(refused)
    loop = loops.muls_add_bf16()
    assert loop is not None
    assert list(private_tmp.iterdir()) == [] and list(refused.iterdir()) == []
    x, y = _bf16_pair()
    out = torch.empty_like(x)
    loop(x, y, out, 1e-3)
    assert torch.equal(out, _definition(x, y, 1e-3))


def test_directory_problems_are_named_exactly(tmp_path: Path) -> None:
    euid = os.geteuid()
    missing = tmp_path / "missing"
    assert native_cache.directory_problem(missing, euid) == (
        f"{missing} cannot be inspected: [Errno 2] No such file or directory: '{missing}'"
    )
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert native_cache.directory_problem(a_file, euid) == f"{a_file} is not a directory"
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert native_cache.directory_problem(link, euid) == f"{link} is a symlink"
    assert native_cache.directory_problem(real, euid) is None
    assert native_cache.directory_problem(real, euid + 1) == (
        f"{real} is owned by uid {euid}, not by this user (uid {euid + 1})"
    )
    os.chmod(real, 0o720)
    assert native_cache.directory_problem(real, euid) == (
        f"{real} is writable by group or others (mode 720)"
    )
    os.chmod(real, 0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    inner = shared / "inner"
    inner.mkdir(mode=0o700)
    assert native_cache.directory_problem(inner, euid) == (
        f"{shared} (above {inner}) is writable by group or others without the sticky bit"
        " (mode 777)"
    )


@needs_root
def test_foreign_ancestor_message(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o755)
    inner = parent / "inner"
    inner.mkdir(mode=0o700)
    os.chown(parent, OTHER_UID, OTHER_UID)
    assert native_cache.directory_problem(inner, os.geteuid()) == (
        f"{parent} (above {inner}) is owned by uid {OTHER_UID}"
    )


def test_the_resolved_path_is_checked_too(tmp_path: Path) -> None:
    # tmp/link -> tmp/shared/real: the lexical parents are fine, the real ones are not.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    real = shared / "real"
    real.mkdir(mode=0o700)
    (real / "cache").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    problem = native_cache.directory_problem(tmp_path / "link" / "cache", os.geteuid())
    assert problem is not None and problem.startswith(f"{shared} (above ")


@needs_root
def test_a_cache_reached_through_another_users_symlink_is_refused(tmp_path: Path) -> None:
    # The link's target is a trusted directory, but the link's owner decides, and can change,
    # where it points: the loader would then run a library from wherever they choose.
    real = tmp_path / "real"
    (real / "cache").mkdir(parents=True, mode=0o700)
    os.chmod(real, 0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, OTHER_UID, OTHER_UID)
    assert native_cache.directory_problem(link / "cache", os.geteuid()) == (
        f"{link} (above {link / 'cache'}) is a symlink owned by uid {OTHER_UID}"
    )
    os.lchown(link, os.geteuid(), os.getegid())  # the boundary: this user's own link
    assert native_cache.directory_problem(link / "cache", os.geteuid()) is None


@needs_root
def test_a_foreign_symlink_inside_a_link_target_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "cache").mkdir(parents=True, mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.symlink_to(real)
    os.lchown(theirs, OTHER_UID, OTHER_UID)
    mine = tmp_path / "mine"
    mine.symlink_to("theirs/../theirs")  # relative, climbing, then through their link
    assert native_cache.directory_problem(mine / "cache", os.geteuid()) == (
        f"{theirs} (above {mine / 'cache'}) is a symlink owned by uid {OTHER_UID}"
    )


def test_a_symlink_loop_above_the_cache_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    problem = native_cache.directory_problem(tmp_path / "a" / "cache", os.geteuid())
    assert problem is not None and "cannot be inspected" in problem


def test_an_uninspectable_ancestor_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = tmp_path / "inner"
    inner.mkdir(mode=0o700)
    real_lstat = os.lstat

    def failing_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(path) == tmp_path:
            raise PermissionError(13, "Permission denied")
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", failing_lstat)
    assert native_cache.directory_problem(inner, os.geteuid()) == (
        f"{tmp_path} cannot be inspected: [Errno 13] Permission denied"
    )


def test_new_directories_are_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o777)  # mkdir alone would create them with no permission at all
    try:
        native_cache.make_private_directory(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "a" / "b"):
        assert directory.stat().st_mode & 0o777 == 0o700
    native_cache.make_private_directory(tmp_path / "a" / "b")  # existing: left alone


def test_a_directory_created_concurrently_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = os.mkdir

    def racing_mkdir(path: Any, mode: int = 0o777) -> None:
        real_mkdir(path, mode)  # "another process" wins the race
        raise FileExistsError(17, "File exists", str(path))

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    native_cache.make_private_directory(tmp_path / "x" / "y")
    assert (tmp_path / "x" / "y").is_dir()


def test_a_failed_atomic_write_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        native_cache.write_atomic(tmp_path, "lib.so", b"data", 0o600)
    assert list(tmp_path.iterdir()) == []


def test_untrusted_file_reasons(tmp_path: Path) -> None:
    euid = os.geteuid()
    with pytest.raises(native_cache.UntrustedFile) as info:
        native_cache.read_trusted(tmp_path / "none", euid)
    assert str(info.value) == f"{tmp_path / 'none'} does not exist"
    os.mkfifo(tmp_path / "fifo", 0o600)  # must not block the open
    with pytest.raises(native_cache.UntrustedFile) as info:
        native_cache.read_trusted(tmp_path / "fifo", euid)
    assert str(info.value) == f"{tmp_path / 'fifo'} is not a regular file"
    shared = tmp_path / "shared.so"
    _plant(shared, b"x", mode=0o646)
    with pytest.raises(native_cache.UntrustedFile) as info:
        native_cache.read_trusted(shared, euid)
    assert str(info.value) == f"{shared} is writable by group or others"
    mine = tmp_path / "mine.so"
    _plant(mine, b"x", mode=0o600)
    with pytest.raises(native_cache.UntrustedFile, match=f"owned by uid {euid}, not by uid"):
        native_cache.read_trusted(mine, euid + 1)
    assert native_cache.read_trusted(mine, euid) == b"x"


def test_no_trusted_place_at_all_means_the_torch_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    os.chmod(shared_tmp, 0o777)  # no sticky bit: a private directory in it is not private
    monkeypatch.setattr("tempfile.tempdir", str(shared_tmp))
    refused = tmp_path / "cache"
    refused.mkdir()
    os.chmod(refused, 0o777)
    loops = native_loops.NativeLoops(refused)
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        assert loops.muls_add_bf16() is None
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert "unavailable, using torch paths: no trusted directory to build in: " in (
        caplog.records[1].getMessage()
    )
    assert list(shared_tmp.iterdir()) == [] and list(refused.iterdir()) == []


def test_compiler_from_cc_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc is not None
    monkeypatch.setenv("CC", gcc)
    assert native_loops.NativeLoops(Path("/unused")).compiler == gcc
    monkeypatch.setenv("CC", "no-such-compiler-here")
    assert native_loops.NativeLoops(Path("/unused")).compiler == shutil.which("cc")


def test_a_symlink_is_not_opened_and_the_reason_is_named(tmp_path: Path) -> None:
    real = tmp_path / "real.so"
    _plant(real, b"x", mode=0o600)
    link = tmp_path / "link.so"
    link.symlink_to(real)
    with pytest.raises(native_cache.UntrustedFile) as info:
        native_cache.read_trusted(link, os.geteuid())
    assert str(info.value).startswith(f"{link} cannot be opened safely: [Errno {errno.ELOOP}] ")


def test_a_record_that_is_not_ascii_is_a_mismatch(tmp_path: Path) -> None:
    euid = os.geteuid()
    library, record = tmp_path / "lib.so", tmp_path / "lib.sha256"
    _plant(library, b"code", mode=0o600)
    digest = native_cache.sha256_hex(b"code")
    _plant(record, f"{digest}\n".encode(), mode=0o600)
    native_cache.verify_against_record(library, record, euid)  # the matching record passes
    for damaged in (b"\xff" + digest.encode()[1:], digest.encode() + b"\xe9"):
        _plant(record, damaged, mode=0o600)
        with pytest.raises(native_cache.UntrustedFile) as info:
            native_cache.verify_against_record(library, record, euid)
        assert str(info.value) == (
            f"{library} does not match its recorded sha256 (damaged or replaced)")


def test_atomic_write_goes_through_a_hidden_temporary_in_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replaced: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        replaced.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "not-here"))  # never used
    target = native_cache.write_atomic(tmp_path, "lib.so", b"data", 0o640)
    assert target == tmp_path / "lib.so" and target.read_bytes() == b"data"
    assert target.stat().st_mode & 0o777 == 0o640
    [(src, dst)] = replaced
    assert dst == target and src.parent == tmp_path and src.name.startswith(".lib.so.")
    assert list(tmp_path.iterdir()) == [target]


def test_a_failed_write_whose_temporary_is_already_gone_reports_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_fsync(fd: int) -> None:
        for leftover in tmp_path.glob(".lib.so.*"):  # e.g. removed by a cache cleaner
            leftover.unlink()
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError) as info:
        native_cache.write_atomic(tmp_path, "lib.so", b"data", 0o600)
    assert info.value.errno == errno.EIO and list(tmp_path.iterdir()) == []

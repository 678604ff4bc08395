"""The build cache's trust rule (``emulation/trusted_cache.py``) where the emulation's build
tests do not reach it: the own cache without a home, ``..``, symlink loops, files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from torch_npu_double.emulation import trusted_cache


def test_own_cache_is_in_home_then_the_passwd_home_then_a_stand_in(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert trusted_cache.own_cache_dir() == tmp_path / ".cache"
    monkeypatch.delenv("HOME")

    class Entry:
        pw_dir = "/home/someone"

    monkeypatch.setattr(trusted_cache.pwd, "getpwuid", lambda uid: Entry())
    assert trusted_cache.own_cache_dir() == Path("/home/someone/.cache")

    def no_entry(uid: int) -> None:
        raise KeyError(uid)

    monkeypatch.setattr(trusted_cache.pwd, "getpwuid", no_entry)
    stand_in = Path(tempfile.gettempdir()) / f"torch-npu-double-{os.geteuid()}" / ".cache"
    assert trusted_cache.own_cache_dir() == stand_in


def test_dot_dot_is_resolved_after_a_symlink_as_the_kernel_does(tmp_path: Path) -> None:
    real = trusted_cache.make_private_dir(tmp_path / "a" / "deep")
    (tmp_path / "link").symlink_to(real)
    # <link>/.. is the folder above the link's target (a), not tmp_path
    reached = trusted_cache.make_private_dir(tmp_path / "link" / ".." / "made")
    assert reached == tmp_path / "a" / "made" and reached.is_dir()
    assert (reached.stat().st_mode & 0o777) == 0o700


def test_a_symlink_loop_and_a_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        trusted_cache.make_private_dir(tmp_path / "loop" / "cache")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        trusted_cache.make_private_dir(tmp_path / "file" / "cache")


def test_a_missing_folder_is_not_made_without_create(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        trusted_cache.open_trusted_dir(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()

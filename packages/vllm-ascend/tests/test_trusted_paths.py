"""trusted_paths: every component is inspected without following it, so a symlink another
user owns decides nothing (hosts with fs.protected_symlinks=0 let such links be followed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vllm_ascend.runtime.trusted_paths import (
    UntrustedPathError,
    check_trusted_dir,
    make_private_dir,
)

OTHER_UID = 12345
pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="giving a symlink to another uid needs root (lchown)")


@pytest.fixture
def private(tmp_path: Path) -> Path:
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    (folder / "keys" / "x").mkdir(mode=0o700, parents=True)
    os.chmod(folder / "keys", 0o700)
    return folder


def _link(at: Path, to: Path, uid: int) -> Path:
    at.symlink_to(to)
    os.lchown(at, uid, uid)
    return at


def test_a_directory_reached_through_another_users_symlink_is_refused(
    tmp_path: Path, private: Path
) -> None:
    link = _link(tmp_path / "cache", private, OTHER_UID)
    with pytest.raises(UntrustedPathError, match=rf"^{link} is a symlink owned by uid "
                                                 rf"{OTHER_UID}, not by this user \(uid 0\) "
                                                 r"or root$"):
        check_trusted_dir(link / "keys")
    os.lchown(link, os.geteuid(), os.getegid())  # the boundary: this user's own link
    assert check_trusted_dir(link / "keys") == link / "keys"


def test_a_foreign_symlink_deeper_in_the_target_is_refused(tmp_path: Path,
                                                           private: Path) -> None:
    # Our link to a path that itself goes through another user's link: the target is walked
    # by the same rules.
    _link(private / "theirs", private / "keys", OTHER_UID)
    mine = _link(tmp_path / "mine", private / "theirs", os.geteuid())
    with pytest.raises(UntrustedPathError, match="theirs is a symlink owned by uid 12345"):
        check_trusted_dir(mine / "x")
    os.lchown(private / "theirs", 0, 0)
    assert check_trusted_dir(mine / "x") == mine / "x"


def test_relative_and_climbing_link_targets_are_walked(tmp_path: Path, private: Path) -> None:
    _link(tmp_path / "up", Path("private") / ".." / "private" / "keys", os.geteuid())
    assert check_trusted_dir(tmp_path / "up" / "x") == tmp_path / "up" / "x"
    os.chmod(private, 0o777)  # a directory the link's target passes through: others write it
    with pytest.raises(UntrustedPathError, match=r"private is writable by group or others"):
        check_trusted_dir(tmp_path / "up" / "x")


def test_a_link_loop_is_an_error(tmp_path: Path) -> None:
    _link(tmp_path / "a", tmp_path / "b", os.geteuid())
    _link(tmp_path / "b", tmp_path / "a", os.geteuid())
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        check_trusted_dir(tmp_path / "a" / "x")


def test_make_private_dir_creates_nothing_behind_another_users_symlink(
    tmp_path: Path, private: Path
) -> None:
    link = _link(tmp_path / "logs", private, OTHER_UID)
    with pytest.raises(UntrustedPathError, match="logs is a symlink owned by uid 12345"):
        make_private_dir(link / "vllm_ascend" / "today")
    assert sorted(p.name for p in private.iterdir()) == ["keys"]  # nothing made in there
    made = make_private_dir(tmp_path / "fresh" / "a" / "b")
    for folder in (tmp_path / "fresh", tmp_path / "fresh" / "a", made):
        assert folder.stat().st_mode & 0o777 == 0o700

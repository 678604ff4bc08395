"""trusted_paths: the one trust policy for files the plugin reads back (caches, dumps).

A root must be a directory owned by this user, not writable by group or others, and reached
through no symlink another user owns; every component is inspected without following it (hosts
with fs.protected_symlinks=0 let such links be followed). A refused root is replaced, once per
process with one warning, by a private directory in the user's own cache.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from vllm_ascend.base.trusted_paths import (
    UntrustedPathError,
    check_trusted_dir,
    make_private_dir,
    open_trusted_dir,
    read_bounded_file,
    write_atomic,
)
from vllm_ascend.base.trusted_roots import TrustedRoots, private_fallback

OTHER_UID = 12345
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="giving a path to another uid needs root (chown)")


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


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# --- the root rule, at its boundaries ------------------------------------------------------

def test_a_root_writable_by_group_or_others_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o755)
    assert check_trusted_dir(root) == root  # 0755: only the owner writes
    for mode in (0o775, 0o757, 0o1777):  # sticky does not help: others can still plant names
        os.chmod(root, mode)
        with pytest.raises(UntrustedPathError,
                           match=rf"^{root} is writable by group or others \(mode {mode:o}\)$"):
            check_trusted_dir(root)


@needs_root
def test_a_root_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, OTHER_UID, OTHER_UID)
    with pytest.raises(UntrustedPathError,
                       match=rf"^{other} is owned by uid {OTHER_UID}, not by this user"):
        check_trusted_dir(other)
    os.chown(other, os.geteuid(), os.getegid())
    assert check_trusted_dir(other) == other


@pytest.mark.parametrize(("mode", "owner", "problem"), [
    (0o755, 0, None), (0o700, 0, None),
    (0o1777, 0, None),  # sticky (as /tmp): others cannot move the root this user owns
    (0o777, 0, "is writable by group or others without the sticky bit (mode 777)"),
    (0o775, 0, "is writable by group or others without the sticky bit (mode 775)"),
    (0o757, 0, "is writable by group or others without the sticky bit (mode 757)"),
    pytest.param(0o755, OTHER_UID, f"is owned by uid {OTHER_UID}, not by this user",
                 marks=needs_root),
    pytest.param(0o1777, OTHER_UID, f"is owned by uid {OTHER_UID}, not by this user",
                 marks=needs_root),  # sticky does not help: the owner may move anything
])
def test_every_directory_above_a_root_is_checked(tmp_path: Path, mode: int, owner: int,
                                                 problem: str | None) -> None:
    above = tmp_path / "a" / "b"
    root = above / "c" / "root"
    root.mkdir(mode=0o700, parents=True)
    os.chmod(above / "c", 0o700)
    os.chmod(above, mode)
    if owner:
        os.chown(above, owner, owner)
    if problem is None:
        assert check_trusted_dir(root) == root
        assert make_private_dir(root / "x") == root / "x"
        return
    for check in (check_trusted_dir, make_private_dir):
        with pytest.raises(UntrustedPathError,
                           match="^" + re.escape(f"{above} (above the root) {problem}")):
            check(root)
    with pytest.raises(UntrustedPathError, match="above the root"):
        make_private_dir(root / "new")
    assert not (root / "new").exists()


@needs_root
def test_below_a_sticky_directory_the_next_component_must_be_this_users(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    theirs = sticky / "theirs"  # another user made the name first: they may swap below it
    (theirs / "root").mkdir(mode=0o700, parents=True)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(UntrustedPathError, match=rf"^{theirs} \(above the root\) is owned "
                                                 rf"by uid {OTHER_UID}"):
        check_trusted_dir(theirs / "root")
    os.chown(theirs, os.geteuid(), os.getegid())
    assert check_trusted_dir(theirs / "root") == theirs / "root"


def test_a_root_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UntrustedPathError, match="file is not a directory"):
        check_trusted_dir(tmp_path / "file")
    with pytest.raises(NotADirectoryError):
        make_private_dir(tmp_path / "file" / "below")


@needs_root
def test_a_directory_reached_through_another_users_symlink_is_refused(
    tmp_path: Path, private: Path
) -> None:
    link = _link(tmp_path / "cache", private, OTHER_UID)
    with pytest.raises(UntrustedPathError, match=rf"^{link} is a symlink owned by uid "
                                                 rf"{OTHER_UID}, not by this user \(uid 0\) "
                                                 r"or root$"):
        check_trusted_dir(link / "keys")
    with pytest.raises(UntrustedPathError, match="is a symlink owned by uid"):
        check_trusted_dir(link)  # the root itself being the link
    os.lchown(link, os.geteuid(), os.getegid())  # the boundary: this user's own link
    assert check_trusted_dir(link / "keys") == link / "keys"
    assert check_trusted_dir(link) == link


@needs_root
def test_a_foreign_symlink_deeper_in_the_target_is_refused(tmp_path: Path,
                                                           private: Path) -> None:
    # Our link to a path that itself goes through another user's link: the target is walked
    # by the same rules.
    _link(private / "theirs", private / "keys", OTHER_UID)
    mine = _link(tmp_path / "mine", private / "theirs", os.geteuid())
    with pytest.raises(UntrustedPathError, match="theirs is a symlink owned by uid 12345"):
        check_trusted_dir(mine / "x")
    os.lchown(private / "theirs", 0, 0)  # root's link: root decides where it points
    assert check_trusted_dir(mine / "x") == mine / "x"


@needs_root
def test_relative_and_climbing_link_targets_are_walked(tmp_path: Path, private: Path) -> None:
    _link(tmp_path / "up", Path("private") / ".." / "private" / "keys", os.geteuid())
    assert check_trusted_dir(tmp_path / "up" / "x") == tmp_path / "up" / "x"
    _link(private / "hop", Path("keys"), OTHER_UID)  # a foreign link inside the climb
    _link(tmp_path / "up2", Path("private") / ".." / "private" / "hop", os.geteuid())
    with pytest.raises(UntrustedPathError, match="hop is a symlink owned by uid 12345"):
        check_trusted_dir(tmp_path / "up2" / "x")


@needs_root
def test_dotdot_after_a_link_leaves_the_links_target_as_the_kernel_does(tmp_path: Path) -> None:
    # <their link>/../cache: the text collapses to <tmp>/cache (ours), the kernel opens
    # <theirs>/cache, the folder above the link's target.
    theirs = tmp_path / "theirs"
    (theirs / "deep").mkdir(parents=True)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    link = _link(tmp_path / "link", theirs / "deep", OTHER_UID)
    for check in (check_trusted_dir, make_private_dir):
        with pytest.raises(UntrustedPathError, match=f"^{link} is a symlink owned by uid "
                                                     f"{OTHER_UID}"):
            check(f"{link}/../cache")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "theirs"]
    assert sorted(p.name for p in theirs.iterdir()) == ["deep"]
    # The boundary: our own link is followed, and ``..`` leaves its target, not the link's
    # folder; the path given back is the folder reached.
    mine = tmp_path / "mine"
    (mine / "deep").mkdir(parents=True, mode=0o700)
    os.chmod(mine, 0o700)
    own = _link(tmp_path / "own", mine / "deep", os.geteuid())
    assert make_private_dir(f"{own}/../cache") == mine / "cache"
    assert _mode(mine / "cache") == 0o700 and not (tmp_path / "cache").exists()
    with open_trusted_dir(f"{own}/../cache") as trusted:
        assert trusted.path == mine / "cache"
    # A relative path with ``..`` is walked from the working directory the same way.
    cwd = os.getcwd()
    os.chdir(own)
    try:
        assert check_trusted_dir("../cache") == mine / "cache"
    finally:
        os.chdir(cwd)
    # Without ``..`` the path is given back as written (the link kept).
    assert check_trusted_dir(own) == own


def test_a_link_loop_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        check_trusted_dir(tmp_path / "a" / "x")


@needs_root
def test_make_private_dir_creates_nothing_behind_another_users_symlink(
    tmp_path: Path, private: Path
) -> None:
    link = _link(tmp_path / "logs", private, OTHER_UID)
    with pytest.raises(UntrustedPathError, match="logs is a symlink owned by uid 12345"):
        make_private_dir(link / "vllm_ascend" / "today")
    assert sorted(p.name for p in private.iterdir()) == ["keys"]  # nothing made in there
    made = make_private_dir(tmp_path / "fresh" / "a" / "b")
    for folder in (tmp_path / "fresh", tmp_path / "fresh" / "a", made):
        assert _mode(folder) == 0o700


# --- entries: bounded reads, atomic writes --------------------------------------------------

def test_reads_are_bounded_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded_file(path, limit=100) == b"x" * 100
    with pytest.raises(UntrustedPathError, match="is 100 bytes, over the 99-byte limit"):
        read_bounded_file(path, limit=99)


def test_reads_refuse_symlinks_and_never_block_on_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UntrustedPathError, match="link is a symlink"):
        read_bounded_file(tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_bounded_file(tmp_path / "fifo")
        except BaseException as exc:
            done.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "a read of a FIFO blocked"
    assert isinstance(done[0], UntrustedPathError) and "not a regular file" in str(done[0])


def test_writes_are_atomic_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "entry"
    write_atomic(target, b"old")
    assert target.read_bytes() == b"old" and _mode(target) == 0o600

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"  # readers still see the whole old file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]  # no temporary left


# --- refused roots: once per process, a private fallback ------------------------------------

@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    logger = logging.getLogger("vllm_ascend.base.trusted_roots")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger=logger.name)
    yield caplog
    logger.removeHandler(caplog.handler)


def _warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    seen = {id(r): r for r in caplog.records}.values()
    return [r.getMessage() for r in seen if r.levelno == logging.WARNING]


def test_a_refused_root_is_replaced_once_with_one_warning(
    tmp_path: Path, warnings: pytest.LogCaptureFixture
) -> None:
    env = {"HOME": str(tmp_path / "home")}
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    roots = TrustedRoots()
    first = roots.root(shared, "XDG_CACHE_HOME", env)
    assert first == tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "XDG_CACHE_HOME"
    assert [_mode(p) for p in (first, first.parent, first.parent.parent)] == [0o700] * 3
    assert roots.root(shared, "XDG_CACHE_HOME", env) == first  # checked once
    [message] = _warned(warnings)
    assert message == (f"not using XDG_CACHE_HOME {shared} ({shared} is writable by group or "
                       f"others (mode 777)); using the private directory {first} instead")
    assert list(shared.iterdir()) == []
    mine = tmp_path / "mine"  # missing: created private, no warning
    assert roots.root(mine, "XDG_CACHE_HOME", env) == mine and _mode(mine) == 0o700
    assert len(_warned(warnings)) == 1


def test_the_fallback_is_a_fresh_temporary_dir_when_the_own_cache_is_refused(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    os.chmod(home / ".cache", 0o777)
    chosen = private_fallback("VLLM_CACHE_ROOT", {"HOME": str(home)})
    assert chosen.name.startswith("vllm-ascend-VLLM_CACHE_ROOT-") and _mode(chosen) == 0o700
    assert check_trusted_dir(chosen) == chosen and list((home / ".cache").iterdir()) == []


def test_vllm_cache_root_is_redirected_when_refused(tmp_path: Path,
                                                    warnings: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o757)
    env = {"HOME": str(tmp_path / "home"), "VLLM_CACHE_ROOT": str(shared)}
    chosen = TrustedRoots().secure_vllm_cache_root(env)
    assert env["VLLM_CACHE_ROOT"] == str(chosen)
    assert chosen == tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "VLLM_CACHE_ROOT"
    assert len(_warned(warnings)) == 1
    # A root that passes is left as the user gave it (created 0700 when missing).
    env = {"HOME": str(tmp_path / "home"), "VLLM_CACHE_ROOT": str(tmp_path / "fine")}
    assert TrustedRoots().secure_vllm_cache_root(env) == tmp_path / "fine"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "fine") and _mode(tmp_path / "fine") == 0o700


def test_a_refused_xdg_cache_home_moves_vllms_default_root_too(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    os.chmod(xdg, 0o777)
    env = {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(xdg)}
    chosen = TrustedRoots().secure_vllm_cache_root(env)
    # vLLM would use XDG_CACHE_HOME/vllm; it is pointed into the private fallback instead.
    fallback = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "XDG_CACHE_HOME"
    assert chosen == fallback / "vllm" and env["VLLM_CACHE_ROOT"] == str(chosen)
    env = {"HOME": str(tmp_path / "home")}  # the default ~/.cache/vllm passes: untouched
    assert TrustedRoots().secure_vllm_cache_root(env) == tmp_path / "home" / ".cache" / "vllm"
    assert "VLLM_CACHE_ROOT" not in env


def test_the_platform_plugin_redirects_vllm_cache_root_before_vllm_reads_it(
    tmp_path: Path,
) -> None:
    # Through vLLM's own platform-plugin loading in a fresh process: what vLLM's envs report
    # afterwards is what its compile cache and every other cache use.
    # The root itself is private; the directory above it is 0777 without the sticky bit, so
    # another user could swap the root after any check.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "root").mkdir(mode=0o700)
    env = {**os.environ, "VLLM_ASCEND_DEVICE": "cpu", "HOME": str(tmp_path / "home"),
           "VLLM_CACHE_ROOT": str(shared / "root")}
    code = ("from vllm.platforms import current_platform; current_platform.device_type; "
            "from vllm import envs; print(envs.VLLM_CACHE_ROOT)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    fallback = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "VLLM_CACHE_ROOT"
    assert done.stdout.strip().splitlines()[-1] == str(fallback)
    assert done.stderr.count(f"not using VLLM_CACHE_ROOT {shared / 'root'} ({shared} (above "
                             "the root) is writable by group or others without the sticky "
                             "bit (mode 777)") == 1
    assert list((shared / "root").iterdir()) == []


def test_without_a_home_a_private_stand_in_under_the_temp_dir_is_used_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warnings: pytest.LogCaptureFixture,
) -> None:
    # HOME unset and no passwd entry for this uid (the subprocess test of register() runs
    # the real thing as such a uid): `~` must not become a directory named "~" in the
    # working directory, nor raise as Path.home() does.
    import pwd

    from vllm_ascend.observability.logging_setup import default_log_dir

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    home = tmp_path / f"vllm-ascend-{os.geteuid()}" / "home"
    roots = TrustedRoots()
    assert default_log_dir({}) == home / "ascend" / "log" / "vllm_ascend"
    logs = roots.root("~/ascend/log/vllm_ascend", "ascend_log_path", {})
    assert logs == home / "ascend" / "log" / "vllm_ascend" and _mode(home) == 0o700
    env: dict[str, str] = {}
    assert roots.secure_vllm_cache_root(env) == home / ".cache" / "vllm"
    assert env == {"VLLM_CACHE_ROOT": str(home / ".cache" / "vllm")}
    assert _warned(warnings) == [f"no home directory (HOME is unset and uid {os.getuid()} has "
                                 f"no passwd entry): using {home} instead (caches and logs "
                                 "go there)"]
    assert not (tmp_path / "~").exists()
    # With a HOME, `~` is that HOME: the environment given, not this process's.
    assert roots.root("~/x", "ascend_log_path", {"HOME": str(tmp_path / "h")}) == \
        tmp_path / "h" / "x"

"""Where converted checkpoints are cached, and when a cache entry is whole
(`vllm_ascend.checkpoints.cache_entry`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path

import pytest
from vllm_ascend.checkpoints.cache_entry import (
    MANIFEST,
    cached_entry,
    checkpoint_cache_root,
    entry_problem,
)
from vllm_ascend.checkpoints.verified_files import RECORD_NAME, SETTLE_NS, VerifiedFiles

SOURCE = "ab" * 32


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_checkpoint_cache_root_is_under_xdg_cache_home_and_private(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    root = checkpoint_cache_root(env)
    assert root == tmp_path / "xdg" / "vllm_ascend" / "checkpoints"
    # Every directory the function created is 0700, the missing XDG_CACHE_HOME included.
    assert [_mode(p) for p in (root, root.parent, root.parent.parent)] == [0o700] * 3


def test_checkpoint_cache_root_defaults_to_home_cache(tmp_path: Path) -> None:
    root = checkpoint_cache_root({"HOME": str(tmp_path)})
    assert root == tmp_path / ".cache" / "vllm_ascend" / "checkpoints"


@pytest.mark.parametrize(("mode", "trusted"), [(0o755, True), (0o775, False), (0o757, False)])
def test_checkpoint_cache_root_redirects_a_shared_writable_xdg_cache_home(
    tmp_path: Path, mode: int, trusted: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    xdg.chmod(mode)
    caplog.set_level(logging.WARNING, logger="vllm_ascend.checkpoints")
    root = checkpoint_cache_root({"XDG_CACHE_HOME": str(xdg), "HOME": str(tmp_path / "home")})
    warnings = [r.getMessage() for r in caplog.records]
    if trusted:
        assert root == xdg / "vllm_ascend" / "checkpoints"
        assert warnings == []
    else:
        private = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "XDG_CACHE_HOME"
        assert root == private / "vllm_ascend" / "checkpoints"
        assert len(warnings) == 1
        assert f"{xdg} is writable by group or others (mode {mode:o})" in warnings[0]
        assert not (xdg / "vllm_ascend").exists()
        assert checkpoint_cache_root({"XDG_CACHE_HOME": str(xdg),
                                      "HOME": str(tmp_path / "home")}) == root
        assert len(caplog.records) == 1  # checked once per process


@pytest.mark.parametrize("how", [
    "0777 without sticky", "group-writable",
    pytest.param("owned by another uid", marks=pytest.mark.skipif(
        os.geteuid() != 0, reason="giving a directory to another uid needs root (chown)"))])
def test_checkpoint_cache_root_redirects_an_xdg_cache_home_below_a_shared_directory(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture,
) -> None:
    # XDG_CACHE_HOME itself is private; the directory above it lets another user swap it.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    xdg = shared / "xdg"
    xdg.mkdir(mode=0o700)
    if how == "0777 without sticky":
        shared.chmod(0o777)
    elif how == "group-writable":
        shared.chmod(0o775)
    else:
        os.chown(shared, 65534, 65534)
    caplog.set_level(logging.WARNING)
    env = {"XDG_CACHE_HOME": str(xdg), "HOME": str(tmp_path / "home")}
    root = checkpoint_cache_root(env)
    private = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "XDG_CACHE_HOME"
    assert root == private / "vllm_ascend" / "checkpoints"
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"not using XDG_CACHE_HOME {xdg} ({shared} (above the root)" in warning
    assert list(xdg.iterdir()) == []
    assert checkpoint_cache_root(env) == root and len(caplog.records) == 1


def test_checkpoint_cache_root_is_a_fresh_private_dir_when_nothing_is_trusted(
    tmp_path: Path,
) -> None:
    for name in ("xdg", "home/.cache"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name).chmod(0o777)
    root = checkpoint_cache_root({"XDG_CACHE_HOME": str(tmp_path / "xdg"),
                                  "HOME": str(tmp_path / "home")})
    fresh = root.parent.parent
    assert fresh.parent == Path(tempfile.gettempdir())
    assert fresh.name.startswith("vllm-ascend-XDG_CACHE_HOME-") and _mode(fresh) == 0o700
    assert list((tmp_path / "xdg").iterdir()) == list((tmp_path / "home/.cache").iterdir()) == []


def test_checkpoint_cache_root_follows_only_this_users_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    env = {"XDG_CACHE_HOME": str(tmp_path / "link"), "HOME": str(tmp_path / "home")}
    assert checkpoint_cache_root(env) == tmp_path / "link" / "vllm_ascend" / "checkpoints"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another uid needs root (lchown)")
def test_checkpoint_cache_root_refuses_another_users_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.lchown(tmp_path / "link", 12345, 12345)
    env = {"XDG_CACHE_HOME": str(tmp_path / "link"), "HOME": str(tmp_path / "home")}
    root = checkpoint_cache_root(env)
    private = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "XDG_CACHE_HOME"
    assert root == private / "vllm_ascend" / "checkpoints"
    assert not (tmp_path / "real" / "vllm_ascend").exists()


def _build(directory: Path) -> None:
    (directory / "config.json").write_text('{"a": 1}')
    (directory / "weights.bin").write_bytes(bytes(range(256)))


def test_cached_entry_builds_private_files_and_a_manifest(tmp_path: Path) -> None:
    entry = cached_entry(tmp_path, "m", SOURCE, _build)
    assert sorted(p.name for p in entry.iterdir()) == ["config.json", MANIFEST, "weights.bin"]
    assert _mode(entry) == 0o700
    assert {_mode(p) for p in entry.iterdir()} == {0o600}
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["source_sha256"] == SOURCE
    assert manifest["files"]["weights.bin"] == {
        "sha256": hashlib.sha256(bytes(range(256))).hexdigest(), "size": 256}
    assert entry_problem(entry, SOURCE) is None
    assert "another source" in str(entry_problem(entry, "cd" * 32))


def test_cached_entry_build_failure_leaves_nothing(tmp_path: Path) -> None:
    def fail(directory: Path) -> None:
        (directory / "partial").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        cached_entry(tmp_path, "m", SOURCE, fail)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda e: (e / "weights.bin").write_bytes(bytes(255)), "has 255 bytes"),
        (lambda e: (e / "weights.bin").write_bytes(bytes(256)), "does not match its sha256"),
        (lambda e: (e / "config.json").unlink(), "missing"),
        (lambda e: (e / MANIFEST).write_text("{"), "Expecting"),
        (lambda e: (e / MANIFEST).unlink(), "manifest.json is missing"),
        # Files transformers/vLLM read when present change behaviour though nothing listed
        # changed: the chat template, the generation defaults.
        (lambda e: (e / "chat_template.jinja").write_text("{{ 'planted' }}"),
         "holds 'chat_template.jinja', which its manifest does not list"),
        (lambda e: (e / "generation_config.json").write_text('{"temperature": 9.0}'),
         "holds 'generation_config.json', which its manifest does not list"),
    ],
)
def test_cached_entry_rebuilds_damage_with_one_warning(
    tmp_path: Path, damage: object, problem: str, caplog: pytest.LogCaptureFixture,
) -> None:
    entry = cached_entry(tmp_path, "m", SOURCE, _build)
    damage(entry)  # type: ignore[operator]
    caplog.set_level(logging.WARNING, logger="vllm_ascend.checkpoints")
    assert cached_entry(tmp_path, "m", SOURCE, _build) == entry
    assert entry_problem(entry, SOURCE) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and problem in warnings[0], warnings
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


# --- a verified record: unchanged files are not hashed again ---------------------------------

class CountingSha256:
    """hashlib's sha256 of a file, counting the files it read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def __call__(self, path: Path) -> str:
        self.read.append(Path(path).name)
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _verified_entry(root: Path) -> Path:
    """An entry built and verified with a record: right after it was written (its files too
    new to record), then once more after the settle time, which records them."""
    import time

    built = VerifiedFiles(root, CountingSha256())
    entry = cached_entry(root, "m", SOURCE, _build, built)
    built.save()
    assert not (root / RECORD_NAME).exists()  # nothing settled yet: nothing recorded
    time.sleep(2 * SETTLE_NS / 1e9)
    hasher = CountingSha256()
    second = VerifiedFiles(root, hasher)
    assert entry_problem(entry, SOURCE, second) is None
    second.save()
    assert sorted(hasher.read) == ["config.json", "weights.bin"]
    assert _mode(root / RECORD_NAME) == 0o600
    return entry


def test_an_unchanged_entry_is_verified_again_without_reading_its_files(tmp_path: Path) -> None:
    entry = _verified_entry(tmp_path)
    hasher = CountingSha256()
    assert entry_problem(entry, SOURCE, VerifiedFiles(tmp_path, hasher)) is None
    assert hasher.read == []
    # without the record every file is read, as before
    assert entry_problem(entry, SOURCE, VerifiedFiles(tmp_path / "elsewhere", hasher)) is None
    assert sorted(hasher.read) == ["config.json", "weights.bin"]


def test_a_rewrite_keeping_size_and_mtime_is_hashed_again(tmp_path: Path) -> None:
    entry = _verified_entry(tmp_path)
    weights = entry / "weights.bin"
    before = weights.stat()
    weights.write_bytes(bytes(256))  # same size, other bytes
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime set back
    hasher = CountingSha256()
    problem = entry_problem(entry, SOURCE, VerifiedFiles(tmp_path, hasher))
    assert problem is not None and "does not match its sha256" in problem
    assert hasher.read == ["weights.bin"]  # ctime changed: only this file was read


def test_a_replaced_file_is_hashed_again(tmp_path: Path) -> None:
    entry = _verified_entry(tmp_path)
    replacement = tmp_path / "new.bin"
    replacement.write_bytes(bytes(range(256)))  # the same bytes, another inode
    os.replace(replacement, entry / "weights.bin")
    hasher = CountingSha256()
    assert entry_problem(entry, SOURCE, VerifiedFiles(tmp_path, hasher)) is None
    assert hasher.read == ["weights.bin"]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda record: record.chmod(0o622),  # writable by others: not trusted
        lambda record: record.write_text("{"),  # not JSON
        lambda record: record.write_text('{"format": 0, "files": {}}'),  # another format
    ],
)
def test_a_record_that_cannot_be_trusted_is_ignored(tmp_path: Path, spoil: object) -> None:
    entry = _verified_entry(tmp_path)
    spoil(tmp_path / RECORD_NAME)  # type: ignore[operator]
    hasher = CountingSha256()
    assert entry_problem(entry, SOURCE, VerifiedFiles(tmp_path, hasher)) is None
    assert sorted(hasher.read) == ["config.json", "weights.bin"]

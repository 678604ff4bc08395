"""safe_io: reads refuse links and special files before reading and stop at their limit;
writes never open an existing entry; commands stop at their output limit."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ascend_topology import CommandError, TopologyError
from ascend_topology.safe_io import (
    check_path_text,
    discard_staging_dir,
    open_staging_dir,
    publish_staging_dir,
    read_limited,
    write_new_file,
    write_proc_value,
)
from ascend_topology.system import read_numa_sysfs, read_thread_names, run_command


@pytest.fixture
def regular(tmp_path: Path) -> Path:
    path = tmp_path / "file.txt"
    path.write_bytes(b"0123456789")
    return path


@pytest.mark.parametrize(("limit", "ok"), [(9, False), (10, True), (11, True)])
def test_read_limit_at_below_and_above_the_size(regular: Path, limit: int, ok: bool) -> None:
    if ok:
        assert read_limited(regular, limit) == "0123456789"
    else:
        with pytest.raises(TopologyError, match="larger than the 9 bytes limit"):
            read_limited(regular, limit)


def test_read_limit_applies_to_files_whose_size_is_not_known(tmp_path: Path) -> None:
    # procfs files report size 0; the limit counts the bytes actually read.
    status = Path("/proc/self/status")
    text = read_limited(status, 1 << 20)
    assert text.startswith("Name:") and "Cpus_allowed_list:" in text
    with pytest.raises(TopologyError, match="larger than the 16 bytes limit"):
        read_limited(status, 16)


def test_read_replaces_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad"
    path.write_bytes(b"ok \xff\xfe end")
    assert read_limited(path, 100) == "ok \ufffd\ufffd end"


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, Path]]:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    yield {
        "FIFO": tmp_path / "fifo",
        "symbolic link": tmp_path / "zero",
        "character device": Path("/dev/zero"),
        "directory": tmp_path / "dir",
        "socket": tmp_path / "sock",
    }
    server.close()


@pytest.mark.timeout(30)
def test_special_files_are_refused_before_reading(specials: dict[str, Path]) -> None:
    for kind, path in specials.items():
        with pytest.raises(TopologyError) as caught:
            read_limited(path, 1 << 20)
        assert str(caught.value) == f"{path} is a {kind}, not a regular file; refused"


def test_nul_in_a_path_is_one_clear_error() -> None:
    assert check_path_text("a/b", "folder") == "a/b"
    with pytest.raises(TopologyError, match="folder 'a\\\\x00b' contains a NUL byte"):
        check_path_text("a\0b", "folder")
    with pytest.raises(TopologyError) as caught:
        read_limited(Path("a\0b"), 10)
    assert str(caught.value) == "file name 'a\\x00b' contains a NUL byte; paths cannot hold one"


def test_write_new_file_replaces_entries_without_following_them(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").symlink_to(victim)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_new_file(fd, "a.txt", "new")
        with pytest.raises(ValueError, match="not a plain file name"):
            write_new_file(fd, "../escape", "x")
    finally:
        os.close(fd)
    assert victim.read_text() == "precious" and (out / "a.txt").read_text() == "new"
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    assert not (tmp_path / "escape").exists()


def test_write_new_file_cleans_up_when_the_name_is_a_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "host.json").mkdir(parents=True)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            write_new_file(fd, "host.json", "{}")
    finally:
        os.close(fd)
    assert [p.name for p in out.iterdir()] == ["host.json"]  # no temporary file left


def test_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(TopologyError, match="f is a regular file, not a folder; refused"):
        open_staging_dir(tmp_path / "f", force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no staging folder left


def test_proc_value_write_neither_creates_nor_follows(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_proc_value(tmp_path / "missing", "1")
    assert not (tmp_path / "missing").exists()
    target = tmp_path / "target"
    target.write_text("ffffffff")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        write_proc_value(tmp_path / "link", "00000001")
    assert target.read_text() == "ffffffff"
    write_proc_value(target, "00000001")
    assert target.read_text() == "00000001"


@pytest.mark.parametrize(("size", "ok"), [(99, True), (100, True), (101, False)])
def test_command_output_limit(size: int, ok: bool) -> None:
    code = f"import sys; sys.stdout.write('x' * {size})"
    if ok:
        assert run_command([sys.executable, "-c", code], limit=100) == "x" * size
    else:
        with pytest.raises(CommandError, match=r"printed more than 100 bytes"):
            run_command([sys.executable, "-c", code], limit=100)


def test_endless_command_output_is_cut_off_and_the_child_killed() -> None:
    code = "import sys\nwhile True: sys.stdout.write('y' * 65536)"
    with pytest.raises(CommandError, match="printed more than 1000000 bytes"):
        run_command([sys.executable, "-c", code], limit=1_000_000, timeout=60)


def test_command_that_closes_stdout_but_keeps_running_times_out() -> None:
    code = "import os, time; os.close(1); time.sleep(30)"
    with pytest.raises(CommandError, match=r"did not finish within 0\.5 s"):
        run_command([sys.executable, "-c", code], timeout=0.5)


@pytest.mark.timeout(30)
def test_sysfs_readers_skip_special_files(tmp_path: Path) -> None:
    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "cpulist").write_text("0-3\n")
    (tmp_path / "node1").mkdir()
    os.mkfifo(tmp_path / "node1" / "cpulist")
    assert read_numa_sysfs(tmp_path) == {0: [0, 1, 2, 3]}
    task = tmp_path / "42" / "task"
    for tid in ("42", "43"):
        (task / tid).mkdir(parents=True)
    (task / "42" / "comm").write_text("python\n")
    (task / "43" / "comm").symlink_to("/dev/zero")
    assert read_thread_names(42, tmp_path) == {42: "python"}


def test_the_readme_states_every_read_limit() -> None:
    from ascend_topology import safe_io

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = [  # (row of the README's limits table, size it states, the limit in the code)
        ("| `host.json` | 1 MiB |", "1 MiB", safe_io.HOST_JSON_LIMIT),
        ("`lspci.txt`) | 4 MiB each |", "4 MiB", safe_io.RECORDED_FILE_LIMIT),
        ("| 4 MiB (the command is killed beyond it", "4 MiB", safe_io.RECORDED_FILE_LIMIT),
        ("`comm`) | 64 KiB |", "64 KiB", safe_io.SYSFS_FILE_LIMIT),
        ("| `/proc/interrupts` | 64 MiB |", "64 MiB", safe_io.INTERRUPTS_LIMIT),
    ]
    units = {"KiB": 1024, "MiB": 1024 * 1024}
    for row, size, limit in rows:
        assert row in readme
        number, unit = size.split()
        assert int(number) * units[unit] == limit, row


@pytest.mark.parametrize(("limit", "shown"), [
    (1023, "1023 bytes"), (1024, "1 KiB"), (1025, "1025 bytes"), (2048, "2 KiB"),
    (1536, "1536 bytes"), (3 * 1024 * 1024, "3 MiB"), (1024 * 1024 + 1024, "1025 KiB")])
def test_limits_are_shown_in_the_largest_whole_unit(
    tmp_path: Path, limit: int, shown: str
) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * (limit + 1))
    with pytest.raises(TopologyError) as caught:
        read_limited(path, limit)
    assert str(caught.value) == f"{path} is larger than the {shown} limit; refused"


def test_block_devices_are_refused(tmp_path: Path) -> None:
    loop = Path("/dev/loop0")
    if not loop.is_block_device():
        pytest.skip("no /dev/loop0 block device here")
    with pytest.raises(TopologyError) as caught:
        read_limited(loop, 10)
    assert str(caught.value) == "/dev/loop0 is a block device, not a regular file; refused"


def test_new_folders_and_files_have_fixed_modes(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        target = tmp_path / "a" / "b" / "c"
        fd, staging = open_staging_dir(target, force=False)  # parents created too
        try:
            write_new_file(fd, "f.txt", "text")
            publish_staging_dir(fd, staging, target, ["f.txt"], force=False)
        finally:
            os.close(fd)
    finally:
        os.umask(old)
    assert staging.parent == target.parent and not staging.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["c"]
    assert (tmp_path / "a" / "b" / "c").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "a" / "b" / "c" / "f.txt").stat().st_mode & 0o777 == 0o644


def test_staging_dir_checks(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(TopologyError) as caught:
        open_staging_dir(tmp_path / "link", force=True)
    assert str(caught.value) == f"{tmp_path}/link is a symbolic link, not a folder; refused"
    (tmp_path / "real" / "x").write_text("x")
    with pytest.raises(TopologyError) as caught:
        open_staging_dir(tmp_path / "real", force=False)
    assert str(caught.value) == (f"{tmp_path}/real is not empty (1 entries); pass --force "
                                 "(force=True) to replace the recorded files in it")
    with pytest.raises(TopologyError) as caught:
        open_staging_dir(Path("a\0b"), force=True)
    assert str(caught.value) == "folder 'a\\x00b' contains a NUL byte; paths cannot hold one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_publishing_into_a_folder_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    # The target is checked again when publishing: a symlink planted after the check is
    # refused, and the staged files stay in the staging folder for the caller to discard.
    target = tmp_path / "rec"
    fd, staging = open_staging_dir(target, force=False)
    try:
        write_new_file(fd, "host.json", "{}")
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
        with pytest.raises(TopologyError, match="rec is a symbolic link, not a folder"):
            publish_staging_dir(fd, staging, target, ["host.json"], force=True)
    finally:
        os.close(fd)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    discard_staging_dir(staging)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "rec"]


def test_publishing_refuses_a_name_that_is_a_folder_before_moving_any_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "rec"
    (target / "b.txt").mkdir(parents=True)
    fd, staging = open_staging_dir(target, force=True)
    try:
        write_new_file(fd, "a.txt", "a")
        write_new_file(fd, "b.txt", "b")
        with pytest.raises(IsADirectoryError):
            publish_staging_dir(fd, staging, target, ["a.txt", "b.txt"], force=True)
    finally:
        os.close(fd)
    assert [p.name for p in target.iterdir()] == ["b.txt"]  # a.txt was not moved either


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_write_new_file_takes_plain_names_only(tmp_path: Path, name: str) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ValueError, match=f"^not a plain file name: {re.escape(repr(name))}$"):
            write_new_file(fd, name, "x")
    finally:
        os.close(fd)


def test_a_planted_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / f".host.json.{os.getpid()}.tmp").symlink_to(victim)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            write_new_file(fd, "host.json", "{}")
    finally:
        os.close(fd)
    assert victim.read_text() == "precious" and not (out / "host.json").exists()


def test_a_file_type_without_a_name_is_called_a_special_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "odd"
    path.write_text("x")
    real_fstat = os.fstat

    def typeless(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((0o644, *tuple(st)[1:]))  # permission bits, no file-type bits

    monkeypatch.setattr(os, "fstat", typeless)
    with pytest.raises(TopologyError) as info:
        read_limited(path, 100)
    assert str(info.value) == f"{path} is a special file, not a regular file; refused"

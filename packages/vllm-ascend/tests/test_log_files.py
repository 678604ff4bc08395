"""The per-process log file keeps its caps and never writes where it should not."""

from __future__ import annotations

import datetime as dt
import errno
import io
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_ascend.observability import log_files
from vllm_ascend.observability import logging_setup as ls
from vllm_ascend.observability.log_files import (
    RETRY_SECONDS,
    RotatingAscendFileHandler,
    prune_dir,
)

NOW = dt.datetime(2026, 1, 2, 3, 4, 5)
NOBODY = 65534


@pytest.fixture(autouse=True)
def _ascend_logger_state(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """caplog listens on the root logger, which the ``vllm_ascend`` logger stops reaching once
    its console handler is configured (``propagate`` off): listen on that logger too, and
    give it back its handlers, level and propagation afterwards."""
    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level,
                    logging.getLogger(name).propagate) for name in ("vllm", "vllm_ascend")}
    logging.getLogger("vllm_ascend").addHandler(caplog.handler)
    yield
    ls.remove_file_logging()
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def _warned(caplog: pytest.LogCaptureFixture) -> str:
    """What the plugin warned, whichever stream its console handler was bound to."""
    records = {id(r): r for r in caplog.records}.values()  # root may have seen it too
    return "\n".join(r.getMessage() for r in records if r.levelno == logging.WARNING)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(i: int, size: int = 60) -> logging.LogRecord:
    return logging.LogRecord("vllm", logging.INFO, "/x.py", 1, "line %s " + "x" * size, (i,), None)


def handler(log_dir: Path, **kw) -> RotatingAscendFileHandler:
    h = RotatingAscendFileHandler(log_dir, **{"max_bytes": 200, "max_files": 3, "now": NOW,
                                              "pid": 42, **kw})
    h.setFormatter(logging.Formatter("%(message)s"))
    return h


def _age(path: Path) -> int:
    """Rotation order: the ``.N`` backup is older the larger N; the base file is newest."""
    suffix = path.name.rpartition(".log")[2]
    return -int(suffix[1:]) if suffix else 0


def written(log_dir: Path) -> list[int]:
    files = sorted((p for p in log_dir.glob("vllm_ascend_*.log*") if p.is_file()),  # no FIFO
                   key=lambda p: (p.name.partition(".log")[0], _age(p)))
    text = "".join(p.read_text() for p in files)
    return [int(line.split()[1]) for line in text.splitlines()]


def test_the_size_cap_holds_after_the_directory_is_deleted(tmp_path) -> None:
    log_dir = tmp_path / "logs"
    h = handler(log_dir)
    for i in range(3):
        h.emit(record(i))
    shutil.rmtree(log_dir)
    for i in range(3, 40):
        h.emit(record(i))
    h.close()
    files = sorted(log_dir.glob("vllm_ascend_*.log*"))
    assert len(files) == 3  # made again, rotated, at most max_files of them
    assert all(p.stat().st_size <= 200 for p in files)  # the cap itself
    assert written(log_dir)[-1] == 39
    assert oct(log_dir.stat().st_mode & 0o777) == "0o700"


def test_a_deleted_file_is_opened_again(tmp_path) -> None:
    h = handler(tmp_path)
    h.emit(record(0))
    h.current_path.unlink()
    h.emit(record(1))
    h.close()
    assert written(tmp_path) == [1]


def test_a_symlink_at_the_file_name_is_never_followed(tmp_path, capsys) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me\n")
    log_dir = tmp_path / "logs"
    log_dir.mkdir(mode=0o700)
    name = f"vllm_ascend_{NOW:%Y%m%d_%H%M%S}_42.log"
    (log_dir / name).symlink_to(target)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        handler(log_dir)
    assert target.read_text() == "keep me\n"


def test_configure_falls_back_to_the_console_for_a_planted_symlink(tmp_path, caplog,
                                                                   monkeypatch) -> None:
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    log_dir = tmp_path / "logs"
    log_dir.mkdir(mode=0o700)
    target = tmp_path / "victim"
    target.write_text("")
    stamp = dt.datetime.now().strftime("%Y%m%d_%H%M%S")
    for seconds in range(-2, 5):  # whichever second the handler starts in
        t = dt.datetime.strptime(stamp, "%Y%m%d_%H%M%S") + dt.timedelta(seconds=seconds)
        (log_dir / f"vllm_ascend_{t:%Y%m%d_%H%M%S}_4242.log").symlink_to(target)
    assert ls.configure_file_logging(log_dir, environ={}) is None
    err = _warned(caplog)
    assert err.count("cannot write log files") == 1 and "symbolic links" in err
    assert target.read_text() == ""


def test_an_unopenable_next_file_degrades_with_one_warning_then_recovers(tmp_path,
                                                                         capsys) -> None:
    clock = Clock()
    h = handler(tmp_path, clock=clock)
    for i in range(3):
        h.emit(record(i))
    blocker = h.current_path
    blocker.unlink()
    os.mkfifo(blocker)  # the file to open again: opening it for writing would block or fail
    for i in range(3, 10):
        h.emit(record(i))  # the reopen fails: no exception, no traceback
    err = capsys.readouterr().err
    assert err.count("cannot write the log file") == 1 and "Traceback" not in err
    # O_NONBLOCK: a FIFO without a reader fails to open (ENXIO) instead of blocking.
    assert "logging to the console only" in err and "No such device or address" in err
    assert written(tmp_path) == [0, 1]  # the rotated backup; record 2 went with the file
    blocker.unlink()
    h.emit(record(10))  # still inside the retry delay: skipped
    clock.now += RETRY_SECONDS + 1
    h.emit(record(11))
    h.close()
    assert written(tmp_path) == [0, 1, 11]
    assert capsys.readouterr().err == ""


def test_retention_prunes_earlier_processes_files_oldest_first(tmp_path) -> None:
    old = []
    for pid in range(5):
        path = tmp_path / f"vllm_ascend_20250101_000000_{pid}.log"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + pid, 1000 + pid))
        old.append(path)
    other = tmp_path / "notes.log"  # not ours by name: never touched
    other.write_bytes(b"y" * 1000)
    h = handler(tmp_path, max_dir_bytes=300)
    h.emit(record(0))
    h.close()
    left = sorted(p.name for p in tmp_path.glob("vllm_ascend_*.log*"))
    # 500 bytes of old files against a 300-byte budget when this file opens: the two oldest go.
    assert left == [old[2].name, old[3].name, old[4].name, h.current_path.name]
    assert other.exists()


def test_prune_never_deletes_the_kept_file(tmp_path) -> None:
    keep = tmp_path / "vllm_ascend_20250101_000000_1.log"
    keep.write_bytes(b"x" * 500)
    os.utime(keep, (1, 1))
    assert prune_dir(tmp_path, 100, keep=keep) == [] and keep.exists()


def _refused_log_dir(log_dir: Path, tmp_path: Path, caplog, reason: str) -> None:
    """``log_dir`` is not used: one warning, the logs go to the private fallback."""
    listed = sorted(p.name for p in log_dir.iterdir())
    h = ls.configure_file_logging(log_dir, environ={"HOME": str(tmp_path / "home")})
    fallback = tmp_path / "home" / ".cache" / "vllm_ascend" / "private" / "ascend_log_path"
    assert h is not None and h.log_dir == fallback
    assert oct(fallback.stat().st_mode & 0o777) == "0o700"
    err = _warned(caplog)
    assert err.count("not using ascend_log_path") == 1 and f"ascend_log_path {log_dir} (" in err
    assert reason in err
    logging.getLogger("vllm_ascend.x").warning("kept %d", 1)
    assert "kept 1" in h.current_path.read_text()
    assert sorted(p.name for p in log_dir.iterdir()) == listed  # nothing written there


def test_a_log_dir_others_can_write_is_replaced(tmp_path, caplog) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    _refused_log_dir(shared, tmp_path, caplog, "writable by group or others")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a path to another uid needs root (chown)")
def test_a_log_dir_another_user_owns_is_replaced(tmp_path, caplog) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    planted = theirs / f"vllm_ascend_{dt.datetime.now():%Y%m%d_%H%M%S}_{os.getpid()}.log"
    planted.write_text("")
    os.chown(theirs, NOBODY, NOBODY)
    _refused_log_dir(theirs, tmp_path, caplog, f"owned by uid {NOBODY}")
    assert planted.read_text() == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a path to another uid needs root (lchown)")
def test_a_log_dir_reached_through_another_users_symlink_is_replaced(tmp_path, caplog) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    _refused_log_dir(link, tmp_path, caplog, f"is a symlink owned by uid {NOBODY}")
    assert list(real.iterdir()) == []


def test_one_file_is_capped_by_truncation(tmp_path) -> None:
    h = handler(tmp_path, max_files=1)
    for i in range(10):
        h.emit(record(i))
    h.close()
    [only] = list(tmp_path.iterdir())
    assert only.stat().st_size <= 200 and written(tmp_path) == [8, 9]


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_dir_bytes=10 at least max_bytes"):
        RotatingAscendFileHandler("/nonexistent", max_bytes=20, max_dir_bytes=10)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs that fills up (mounting needs root or CAP_SYS_ADMIN)."""
    mount_point = tmp_path / "small_fs"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs",
                           str(mount_point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_degrades_to_the_console_once_and_recovers(small_fs, capsys,
                                                               monkeypatch) -> None:
    # Through the real entry point, on both loggers the handler serves: a full file system
    # must not make any log call raise (it used to raise OSError, then ValueError on a closed
    # file forever); one warning, the records keep reaching the console, and the file is
    # written again once space returns (retried RETRY_SECONDS after the last failure).
    monkeypatch.setattr(log_files, "RETRY_SECONDS", 0.0)
    console = io.StringIO()  # stands for the console handler vLLM or the plugin configured
    loggers = [logging.getLogger("vllm"), logging.getLogger("vllm_ascend")]
    loggers[1].addHandler(logging.StreamHandler(console))
    h = ls.configure_file_logging(small_fs / "logs", environ={})
    assert h is not None
    for logger in loggers:
        logger.setLevel(logging.INFO)
    loggers[1].info("before %d", 0)
    filler = _fill(small_fs)
    for i in range(1, 200):  # 200 records of 100+ bytes: past the last free page
        loggers[i % 2].info("full %d %s", i, "x" * 100)
    err = capsys.readouterr().err
    assert err.count("cannot write the log file") == 1 and "Traceback" not in err
    assert "No space left on device" in err and "logging to the console only" in err
    assert "full 199 " in console.getvalue()  # vllm_ascend's console handler still writes
    filler.unlink()
    loggers[0].info("after %d", 1)
    loggers[1].info("after %d", 2)
    text = h.current_path.read_text()
    assert text.startswith("INFO") and "before 0" in text
    assert text.rstrip("\n").endswith("after 2") and "after 1" in text
    assert capsys.readouterr().err == ""

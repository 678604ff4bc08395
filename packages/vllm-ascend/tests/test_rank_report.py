"""rank_report: a report write that fails (a full disk, a value JSON cannot hold) is one
warning and leaves neither a temporary file nor a partial report behind."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs (mounting needs root, as this suite's host runs it)."""
    where = tmp_path / "small_fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(where)],
                             capture_output=True, text=True, check=False)
    assert mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr}"
    try:
        yield where
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", str(where)], check=False)


def _report(binding_lines: int) -> dict:
    return {"dp_rank": 0, "rank": 3, "binding": [f"line {i:06d}" for i in range(binding_lines)]}


def test_a_report_that_fills_the_disk_leaves_no_temporary_file(
    full_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, write_rank_report

    env = {REPORT_DIR_ENV: str(full_disk)}
    big = _report(4096)  # ~70 KB of JSON on a 16 KiB file system
    assert len(json.dumps(big, indent=2)) > 4 * 16 * 1024
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.worker_duties.rank_report"):
        assert write_rank_report(big, env) is None
    assert os.listdir(full_disk) == []
    assert "rank report not written to" in caplog.text and "No space left" in caplog.text
    # Once space is there (a small report), the same directory takes a whole report.
    small = _report(3)
    path = write_rank_report(small, env)
    assert path == full_disk / "dp0-rank3.json" and os.listdir(full_disk) == ["dp0-rank3.json"]
    assert json.loads(path.read_text()) == small


def test_a_report_json_cannot_hold_is_a_warning_and_leaves_no_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, write_rank_report

    env = {REPORT_DIR_ENV: str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.worker_duties.rank_report"):
        assert write_rank_report({"dp_rank": 0, "rank": 0, "fusion": object()}, env) is None
    assert os.listdir(tmp_path) == []
    assert "rank report not written to" in caplog.text and "not JSON serializable" in caplog.text

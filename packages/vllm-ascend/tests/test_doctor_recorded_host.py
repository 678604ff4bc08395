"""`vllm-ascend doctor --host DIR` reads a recorded host by the folder format's rules, as
ascend-topology does: a recording that breaks them is one error line and exit status 2 (bad
input), never a traceback and never a verdict about some other host; optional files may be
absent; no file is read through a symbolic link or past its size limit."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from ascend_topology import example_host_dir
from ascend_topology.safe_io import RECORDED_FILE_LIMIT
from vllm_ascend.entrypoints.cli import main

from .doctor_trees import cann_tree, fake_dist, proc_files, sourced_env

CLEARED = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH", "ATB_HOME_PATH",
           "LD_LIBRARY_PATH", "ASCEND_RT_VISIBLE_DEVICES", "VLLM_ASCEND_DEVICE")
BOARD = "npu-smi-info-t-board.txt"
Run = Callable[[Path], tuple[int, str, str]]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``run(host_dir)`` -> (exit status, stdout, stderr) of ``doctor --json --host DIR`` on a
    complete CANN tree, CANN sourced, torch-npu installed: the NPU platform auto-selected."""
    site = tmp_path_factory.mktemp("site")
    fake_dist(site, "torch-npu", "2.13.0", ["torch==2.13.0.*"])
    monkeypatch.syspath_prepend(str(site))
    root = tmp_path_factory.mktemp("root")
    cann_tree(root)
    proc_files(root)
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in sourced_env().items():
        monkeypatch.setenv(name, value)

    def doctor(host: Path) -> tuple[int, str, str]:
        code = main(["doctor", "--json", "--host", str(host), "--root", str(root)])
        out, err = capsys.readouterr()
        return code, out, err

    return doctor


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A writable copy of the bundled A2 recording."""
    folder = tmp_path / "a2"
    shutil.copytree(example_host_dir("a2-8npu"), folder)
    return folder


def one_error(err: str, host: Path) -> str:
    """The one error line, naming the recording."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("vllm-ascend doctor: error: ") and str(host) in lines[0], err
    return lines[0]


@pytest.mark.parametrize("text", ["{not json", '{"soc": "A2", "numa": {"0": "0-7"}',
                                  '{"soc": "B9", "numa": {"0": "0-191"}}'])
def test_a_broken_host_json_is_bad_input_not_a_host_cpu_verdict(run: Run, host: Path,
                                                                text: str) -> None:
    (host / "host.json").write_text(text)
    code, out, err = run(host)
    assert (code, out) == (2, "")
    assert "host.json" in one_error(err, host)


def test_a_recording_without_its_required_chip_map_is_bad_input(run: Run, host: Path) -> None:
    (host / "npu-smi-info-m.txt").unlink()
    code, _, err = run(host)
    assert code == 2
    assert "missing npu-smi-info-m.txt" in one_error(err, host)


def test_the_optional_status_table_may_be_absent(run: Run, host: Path) -> None:
    (host / "npu-smi-info.txt").unlink()
    code, out, err = run(host)
    assert (code, err) == (0, "")
    npu = next(f for f in json.loads(out)["findings"] if f["check"] == "npu")
    assert npu["verdict"] == "ok" and npu["details"]["logical"] == list(range(8))
    driver = next(f for f in json.loads(out)["findings"] if f["check"] == "driver")
    assert driver["details"] == {"driver": None, "firmware": None}


def test_a_board_file_linking_outside_the_folder_is_refused(run: Run, host: Path,
                                                           tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("Firmware Version : read-from-outside\n")
    (host / BOARD).symlink_to(outside)
    code, out, err = run(host)
    assert (code, out) == (2, "")
    line = one_error(err, host)
    assert BOARD in line and "symbolic link" in line and "read-from-outside" not in line


@pytest.mark.parametrize(("size", "code"), [(RECORDED_FILE_LIMIT, 0),
                                            (RECORDED_FILE_LIMIT + 1, 2)])
def test_the_board_file_is_read_up_to_the_formats_limit(run: Run, host: Path, size: int,
                                                       code: int) -> None:
    head = b"Firmware Version               : 7.5.0.1.220\n"
    (host / BOARD).write_bytes(head + b" " * (size - len(head)))
    got, out, err = run(host)
    assert got == code
    if code == 2:
        assert out == "" and "larger than the 4 MiB limit" in one_error(err, host)
    else:
        driver = next(f for f in json.loads(out)["findings"] if f["check"] == "driver")
        assert driver["details"]["firmware"] == "7.5.0.1.220"


def test_a_board_file_that_is_a_fifo_does_not_block(run: Run, host: Path) -> None:
    os.mkfifo(host / BOARD)
    code, _, err = run(host)
    assert code == 2 and "FIFO" in one_error(err, host)


@pytest.mark.parametrize("option", ["--host", "--root"])
def test_a_folder_name_too_long_for_the_file_system_is_bad_usage(
        option: str, capsys: pytest.CaptureFixture[str]) -> None:
    value = "/" + "x" * 300  # one name longer than NAME_MAX (255)
    with pytest.raises(SystemExit) as stopped:
        main(["doctor", option, value])
    assert stopped.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    if option == "--host":  # ascend-topology's recorded-host reader names it, as its CLI does
        assert last == (f"vllm-ascend doctor: error: --host '{value[:200]}...': cannot be "
                        "inspected: File name too long")
    else:
        assert last == (f"vllm-ascend doctor: error: {option} '{value[:160]}... (301 characters)'"
                        ": File name too long")

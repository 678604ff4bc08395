"""``is_rc_device`` and ``read_lspci``: whether a 310P card runs in RC mode, from lspci's text."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ascend_topology import (
    is_rc_device,
    read_lspci,
)

from .conftest import InstallFake

EP_LSPCI = ("00:00.0 PCI bridge: Huawei Technologies Co., Ltd. HiSilicon PCIe Root Port\n"
            "01:00.0 Processing accelerators: Huawei Technologies Co., Ltd. Device d500\n")


RC_LSPCI = "00:00.0 PCI bridge: Huawei Technologies Co., Ltd. Device 3004\n"


def test_is_rc_device_is_false_off_310p() -> None:
    assert is_rc_device("A2", RC_LSPCI) is False
    assert is_rc_device("A5", "") is False


def test_is_rc_device_detects_ep_from_an_accelerators_line() -> None:
    assert is_rc_device("310P", EP_LSPCI) is False


def test_is_rc_device_detects_rc_without_an_accelerators_line() -> None:
    assert is_rc_device("310P", RC_LSPCI) is True
    assert is_rc_device("310P", "") is True  # lspci ran and listed nothing of the kind


def test_is_rc_device_defaults_to_ep_when_lspci_is_unavailable() -> None:
    assert is_rc_device("310P", None) is False


def test_read_lspci(install_fake_npu_smi: InstallFake, monkeypatch: pytest.MonkeyPatch,
                    tmp_path: Path) -> None:
    install_fake_npu_smi("310p", lspci=RC_LSPCI)
    assert read_lspci() == RC_LSPCI
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert read_lspci() is None
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "lspci").write_text(f"#!{sys.executable}\nraise SystemExit(1)\n")
    (failing / "lspci").chmod(0o755)
    monkeypatch.setenv("PATH", str(failing))
    assert read_lspci() is None
    (failing / "lspci").write_text(f"#!{sys.executable}\nimport time\ntime.sleep(3)\n"
                                   "print('accelerators')\n")
    assert read_lspci(timeout=0.3) is None  # gave up: a hung lspci does not hold start-up

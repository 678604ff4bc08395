"""Every environment variable the Ascend plugin reads or writes, and typed access to them.

Stdlib only (no pydantic), so ``vllm_ascend.register()`` can use it within its start-up budget.
``envs.VLLM_ASCEND_ENABLE_NZ`` reads ``os.environ`` on every access and returns the typed value
(the default when unset); an invalid value raises :class:`EnvVarError` naming the variable and
the allowed values. ``read(name, environ)`` does the same for an explicit mapping.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import NamedTuple

from ascend_config.errors import AscendConfigError, make_problem

__all__ = [
    "REGISTRY",
    "EnvChange",
    "EnvVar",
    "EnvVarError",
    "apply_env_changes",
    "names",
    "read",
    "source",
]


EnvValue = str | bool | int | None

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class EnvVar:
    """One variable: how its text is parsed, its default and what it means.

    ``kind``: ``str`` (text as is), ``lower`` (lower-cased text), ``flag`` (0/1/true/false or any
    integer, as ``bool(int(...))`` upstream), ``int``, ``choice`` (one of ``choices``).
    ``config_key``: the ``additional_config`` key it is the deprecated fallback of.
    """

    name: str
    kind: str
    default: EnvValue
    description: str
    choices: tuple[str, ...] = ()
    int_range: tuple[int, int] | None = None
    config_key: str | None = None
    written: bool = False

    def allowed(self) -> str:
        """What the variable accepts, in words."""
        if self.kind == "flag":
            return "0 or 1 (also true/false, yes/no, on/off)"
        if self.kind == "int":
            if self.int_range:
                lo, hi = self.int_range
                if hi - lo > 4:
                    return f"an integer from {lo} to {hi}"
                return ", ".join(str(i) for i in range(lo, hi + 1))
            return "an integer"
        if self.kind == "choice":
            return " | ".join(self.choices)
        return "any text"

    def parse(self, text: str) -> EnvValue:
        """Parse ``text``; raise :class:`EnvVarError` naming the variable when invalid."""
        stripped = text.strip()
        if self.kind == "str":
            return text
        if self.kind == "lower":
            return stripped.lower()
        if self.kind == "choice":
            if stripped.lower() in self.choices:
                return stripped.lower()
        elif self.kind == "flag":
            low = stripped.lower()
            if low in _TRUE or low in _FALSE:
                return low in _TRUE
            number = _as_int(stripped)
            if number is not None:
                return number != 0
        elif self.kind == "int":
            number = _as_int(stripped)
            lo, hi = self.int_range or (number, number)
            if number is not None and lo is not None and hi is not None and lo <= number <= hi:
                return number
        raise EnvVarError(self, text)


def _as_int(text: str) -> int | None:
    if len(text) > 30:  # a value this long is never a sensible count; refuse it early
        return None
    try:
        return int(text)
    except ValueError:
        return None


class EnvVarError(AscendConfigError):
    """An environment variable holds a value it does not accept."""

    def __init__(self, var: EnvVar, text: str) -> None:
        self.var = var
        super().__init__([make_problem(f"env {var.name}", text, var.allowed(), "invalid value")])


def _v(name: str, kind: str, default: EnvValue, description: str, **kw: object) -> EnvVar:
    return EnvVar(name, kind, default, description, **kw)  # type: ignore[arg-type]


REGISTRY: tuple[EnvVar, ...] = (
    # Read by the plugin (upstream envs.py).
    _v("VLLM_ASCEND_DEVICE", "choice", "auto",
       "where the plugin activates: auto (only where an NPU is present), npu, or cpu (the Ascend "
       "pipeline on the host CPU with reference kernels)", choices=("auto", "npu", "cpu")),
    _v("VLLM_ASCEND_WORKER_CONFIG_INPUTS", "str", None,
       "internal, set by the engine-side platform: the JSON inputs of config resolution "
       "(additional_config, deployment facts, Ascend env vars) that worker processes "
       "resolve again, inline up to 32 KiB, else the path of a private file holding them; "
       "never set it by hand"),
    _v("VLLM_ASCEND_RANK_REPORT_DIR", "str", None,
       "directory where every worker writes dp<D>-rank<R>.json (its CPU binding and fusion "
       "counts); unset = no report files"),
    _v("MAX_JOBS", "str", None, "build parallelism (unset = all cores)"),
    _v("CMAKE_BUILD_TYPE", "str", None, "Release, Debug or RelWithDebugInfo (unset = Release)"),
    _v("COMPILE_CUSTOM_KERNELS", "flag", True,
       "build the custom kernels; 0 only for CPU-only unit tests (the worker warns)"),
    _v("CXX_COMPILER", "str", None, "C++ compiler for the build"),
    _v("C_COMPILER", "str", None, "C compiler for the build"),
    _v("SOC_VERSION", "str", None, "chip to build for (otherwise queried via npu-smi)"),
    _v("VERBOSE", "flag", False, "verbose build output"),
    _v("ASCEND_HOME_PATH", "str", None, "CANN toolkit home"),
    _v("HCCL_SO_PATH", "str", None, "HCCL library for pyhccl (else libhccl.so)"),
    _v("VLLM_VERSION", "str", None, "override the detected vLLM version (source installs)"),
    _v("MSMONITOR_USE_DAEMON", "flag", False, "msMonitor daemon mode (deprecated fallback)",
       config_key="msmonitor_use_daemon"),
    _v("VLLM_ASCEND_ENABLE_MLAPO", "flag", True, "MLAPO for DeepSeek W8A8 (deprecated fallback)",
       config_key="enable_mlapo"),
    _v("VLLM_ASCEND_ENABLE_NZ", "int", 1,
       "weight NZ mode: 0 off, 1 quantized weights only, 2 also BF16/FP16 (deprecated "
       "fallback)", int_range=(0, 2), config_key="weight_nz_mode"),
    _v("DYNAMIC_EPLB", "lower", "false", "dynamic EPLB on model runner v1 (true or 1 enables)"),
    _v("VLLM_ASCEND_ENABLE_FUSED_MC2", "int", 0,
       "1 allows dispatch_ffn_combine / mega_moe (deprecated fallback)", int_range=(0, 1),
       config_key="enable_fused_mc2"),
    _v("VLLM_ASCEND_BALANCE_SCHEDULING", "flag", False,
       "balance scheduling (deprecated fallback)",
       config_key="scheduler_config.enable_balance_scheduling"),
    _v("VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK", "flag", True,
       "fused transpose-kv-cache op (deprecated fallback)",
       config_key="enable_transpose_kv_cache_by_block"),
    _v("VLLM_ASCEND_ENABLE_BATCH_MEMCPY", "choice", None,
       "1 forces, 0 disables the aclrtMemcpyBatchAsync build path; unset = auto",
       choices=("0", "1")),
    _v("VLLM_ASCEND_ENABLE_FLASHCOMM1", "str", None,
       "deprecated: FlashComm now uses upstream configuration (setting it only warns)"),
    _v("EXPERT_MAP_RECORD", "lower", "false", "record the expert map (true enables dynamic EPLB)"),
    _v("ASCEND_RT_VISIBLE_DEVICES", "str", None, "visible NPUs (filters the CPU-binding plan)"),
    _v("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "str", None,
       "ask Ray not to set ASCEND_RT_VISIBLE_DEVICES"),
    _v("ASCEND_LAUNCH_BLOCKING", "flag", False, "synchronous launches; graph mode refuses it"),
    _v("HCCL_INTRA_ROCE_ENABLE", "str", None, "hierarchical comm detection (0 with PCIE 1)"),
    _v("HCCL_INTRA_PCIE_ENABLE", "str", None, "hierarchical comm detection (1 with ROCE 0)"),
    _v("ASCEND_CUSTOM_OPP_PATH", "str", None, "custom operator path (prepended at bootstrap)"),
    _v("LD_LIBRARY_PATH", "str", None, "library path (custom-op bootstrap may prepend)"),
    _v("PROFILING_SYMBOLS_PATH", "str", None, "service-profiler symbol file location"),
    _v("VLLM_USE_V2_MODEL_RUNNER", "flag", False, "vLLM: use model runner v2"),
    _v("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "int", 300,
       "vLLM: model execution timeout (raised to 3000 when below HCCL's 1836 s)",
       int_range=(0, 10**9)),
    _v("VLLM_USE_BREAKABLE_CUDAGRAPH", "flag", False, "vLLM: breakable graphs (forced off)"),
    _v("VLLM_LOGGING_LEVEL", "str", "INFO", "vLLM: log level (also for the Ascend logger)"),
    _v("VLLM_LOGGING_STREAM", "str", None, "vLLM: log stream (stdout or stderr)"),
    _v("VLLM_LOGGING_COLOR", "str", None, "vLLM: 1 forces colour, 0 disables"),
    _v("NO_COLOR", "str", None, "disable coloured logs when set"),
    # Written by the plugin (returned as env changes by ascend_config.resolve).
    _v("PYTORCH_NPU_ALLOC_CONF", "str", None,
       "NPU allocator options; rl_config strips expandable_segments", written=True),
    _v("VLLM_BATCH_INVARIANT", "flag", False,
       "vLLM: batch-invariant kernels (set by rl_config.enable_batch_invariant)", written=True),
    _v("VLLM_SERVER_DEV_MODE", "flag", False, "vLLM: dev endpoints (set by rl_config)",
       written=True),
    _v("HCCL_DETERMINISTIC", "str", None, "HCCL determinism (strict under batch invariance)",
       written=True),
    _v("LCCL_DETERMINISTIC", "str", None, "LCCL determinism (1 under batch invariance)",
       written=True),
    _v("LOCAL_WORLD_SIZE", "int", None, "written for the static kernel", int_range=(0, 10**6),
       written=True),
    _v("VLLM_DISABLE_SHARED_EXPERTS_STREAM", "str", None,
       "vLLM: set to 1 on NPU (CUDA-only stream code)", written=True),
    _v("ASCEND_LOCAL_COMM_RES", "str", None, "local comm endpoints (JSON from the kv connector)",
       written=True),
    _v("VLLM_ASCEND_RANK_PLAN", "str", None,
       "internal, set by the host-CPU platform: the per-rank CPU plan handed to vLLM's CPU "
       "workers; never set it by hand", written=True),
    _v("VLLM_CPU_OMP_THREADS_BIND", "str", None,
       "vLLM: OpenMP CPUs per local rank ('0-3|4-7'); the host-CPU platform writes its rank "
       "plan here unless the user set it", written=True),
)

BY_NAME: Mapping[str, EnvVar] = {v.name: v for v in REGISTRY}


def read(name: str, environ: Mapping[str, str] | None = None) -> EnvValue:
    """Typed value of ``name`` in ``environ`` (``os.environ`` when None; its default when unset)."""
    if environ is None:
        environ = os.environ
    var = BY_NAME.get(name)
    if var is None:
        raise AttributeError(f"unknown Ascend environment variable {name!r}")
    text = environ.get(name)
    return var.default if text is None else var.parse(text)


def source(name: str, environ: Mapping[str, str]) -> str:
    """``"environment"`` when ``name`` is set in ``environ``, else ``"default"``."""
    return "environment" if name in environ else "default"


class EnvChange(NamedTuple):
    """An environment change for the caller to apply: ``value`` None means unset ``name``."""

    name: str
    value: str | None


def apply_env_changes(
    changes: Iterable[EnvChange], environ: MutableMapping[str, str]
) -> list[str]:
    """Apply ``changes`` to ``environ`` (e.g. ``os.environ``); return one line per change made."""
    done: list[str] = []
    for change in changes:
        if change.value is None:
            if environ.pop(change.name, None) is not None:
                done.append(f"unset {change.name}")
        elif environ.get(change.name) != change.value:
            environ[change.name] = change.value
            done.append(f"{change.name}={change.value}")
    return done


def names() -> list[str]:
    """Every registered variable name, in registry order."""
    return [v.name for v in REGISTRY]


def __getattr__(name: str) -> EnvValue:
    if name in BY_NAME:
        return read(name)
    raise AttributeError(f"module 'ascend_config.envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return names()

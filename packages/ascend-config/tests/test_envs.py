"""The env registry: typed lazy access, defaults, invalid values, dir()."""

from __future__ import annotations

import pytest
from ascend_config import (
    AscendConfig,
    EnvChange,
    EnvVarError,
    apply_env_changes,
    envs,
)
from ascend_config.envs import BY_NAME, REGISTRY, EnvVar

SAMPLES = {
    "flag": [("1", True), ("0", False), ("true", True), ("OFF", False), ("2", True)],
    "int": [("0", 0)],
    "lower": [("TRUE", "true"), ("False", "false")],
    "str": [("abc", "abc"), ("", "")],
}


def test_every_reference_variable_is_registered() -> None:
    reference = {
        "MAX_JOBS", "CMAKE_BUILD_TYPE", "COMPILE_CUSTOM_KERNELS", "CXX_COMPILER", "C_COMPILER",
        "SOC_VERSION", "VERBOSE", "ASCEND_HOME_PATH", "HCCL_SO_PATH", "VLLM_VERSION",
        "MSMONITOR_USE_DAEMON", "VLLM_ASCEND_ENABLE_MLAPO", "VLLM_ASCEND_ENABLE_NZ",
        "DYNAMIC_EPLB", "VLLM_ASCEND_ENABLE_FUSED_MC2", "VLLM_ASCEND_BALANCE_SCHEDULING",
        "VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK", "VLLM_ASCEND_ENABLE_BATCH_MEMCPY",
        "VLLM_ASCEND_ENABLE_FLASHCOMM1", "EXPERT_MAP_RECORD", "ASCEND_RT_VISIBLE_DEVICES",
        "PYTORCH_NPU_ALLOC_CONF", "ASCEND_LAUNCH_BLOCKING", "LOCAL_WORLD_SIZE",
        "HCCL_INTRA_ROCE_ENABLE", "HCCL_INTRA_PCIE_ENABLE", "HCCL_DETERMINISTIC",
        "LCCL_DETERMINISTIC", "VLLM_BATCH_INVARIANT", "VLLM_SERVER_DEV_MODE",
        "VLLM_DISABLE_SHARED_EXPERTS_STREAM", "ASCEND_CUSTOM_OPP_PATH", "LD_LIBRARY_PATH",
        "ASCEND_LOCAL_COMM_RES", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
        "VLLM_USE_BREAKABLE_CUDAGRAPH", "VLLM_USE_V2_MODEL_RUNNER", "VLLM_LOGGING_LEVEL",
        "VLLM_LOGGING_STREAM", "VLLM_LOGGING_COLOR", "NO_COLOR", "VLLM_ASCEND_DEVICE",
    }
    assert reference <= set(BY_NAME)
    assert len(BY_NAME) == len(REGISTRY)  # each declared once


@pytest.mark.parametrize(("name", "default"), [
    ("VLLM_ASCEND_DEVICE", "auto"), ("VLLM_ASCEND_ENABLE_NZ", 1), ("DYNAMIC_EPLB", "false"),
    ("VLLM_ASCEND_ENABLE_FUSED_MC2", 0), ("COMPILE_CUSTOM_KERNELS", True), ("VERBOSE", False),
    ("MSMONITOR_USE_DAEMON", False), ("VLLM_ASCEND_ENABLE_MLAPO", True),
    ("VLLM_ASCEND_BALANCE_SCHEDULING", False), ("MAX_JOBS", None),
    ("VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK", True),
    ("VLLM_ASCEND_ENABLE_BATCH_MEMCPY", None), ("EXPERT_MAP_RECORD", "false"),
])
def test_defaults_when_unset(name: str, default: object) -> None:
    assert envs.read(name, {}) == default


@pytest.mark.parametrize("var", REGISTRY, ids=[v.name for v in REGISTRY])
def test_every_variable_unset_and_sampled(var: envs.EnvVar) -> None:
    assert envs.read(var.name, {}) == var.default
    for text, value in SAMPLES.get(var.kind, []):
        if var.kind == "int" and var.int_range and not var.int_range[0] <= value <= 0:
            continue
        assert envs.read(var.name, {var.name: text}) == value


@pytest.mark.parametrize(("text", "value"), [("auto", "auto"), ("npu", "npu"), ("CPU", "cpu")])
def test_device_choice(text: str, value: str) -> None:
    assert envs.read("VLLM_ASCEND_DEVICE", {"VLLM_ASCEND_DEVICE": text}) == value


@pytest.mark.parametrize(("name", "text", "allowed"), [
    ("VLLM_ASCEND_DEVICE", "gpu", "auto | npu | cpu"),
    ("VLLM_ASCEND_ENABLE_NZ", "3", "0, 1, 2"),
    ("VLLM_ASCEND_ENABLE_NZ", "x" * 50, "0, 1, 2"),
    ("VLLM_ASCEND_ENABLE_FUSED_MC2", "-1", "0, 1"),
    ("COMPILE_CUSTOM_KERNELS", "maybe", "0 or 1"),
    ("VLLM_ASCEND_ENABLE_BATCH_MEMCPY", "2", "0 | 1"),
])
def test_invalid_value_names_variable_and_allowed(name: str, text: str, allowed: str) -> None:
    with pytest.raises(EnvVarError) as info:
        envs.read(name, {name: text})
    message = str(info.value)
    assert name in message and allowed in message
    assert isinstance(info.value, ValueError)


def test_lazy_module_attributes_follow_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ASCEND_ENABLE_NZ", raising=False)
    assert envs.VLLM_ASCEND_ENABLE_NZ == 1
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_NZ", "2")
    assert envs.VLLM_ASCEND_ENABLE_NZ == 2
    monkeypatch.setenv("VLLM_ASCEND_DEVICE", "cpu")
    assert envs.VLLM_ASCEND_DEVICE == "cpu"


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="NOT_A_VAR"):
        _ = envs.NOT_A_VAR
    with pytest.raises(AttributeError):
        envs.read("NOT_A_VAR", {})


def test_dir_lists_every_variable() -> None:
    assert dir(envs) == sorted(v.name for v in REGISTRY) == sorted(envs.names())


def test_source() -> None:
    assert envs.source("VLLM_ASCEND_ENABLE_NZ", {"VLLM_ASCEND_ENABLE_NZ": "0"}) == "environment"
    assert envs.source("VLLM_ASCEND_ENABLE_NZ", {}) == "default"


@pytest.mark.parametrize(("name", "text", "value"), [
    ("VLLM_ASCEND_ENABLE_NZ", "-1", None), ("VLLM_ASCEND_ENABLE_NZ", "0", 0),
    ("VLLM_ASCEND_ENABLE_NZ", "2", 2), ("VLLM_ASCEND_ENABLE_NZ", "3", None),
    ("VLLM_ASCEND_ENABLE_NZ", " 1 ", 1),
    ("VLLM_ASCEND_ENABLE_FUSED_MC2", "1", 1), ("VLLM_ASCEND_ENABLE_FUSED_MC2", "2", None),
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1000000000", 10**9),
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1000000001", None),
    ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "-1", None),
    ("LOCAL_WORLD_SIZE", "1000000", 10**6), ("LOCAL_WORLD_SIZE", "1000001", None),
    # integers longer than 30 characters are refused before int() runs
    ("VLLM_ASCEND_ENABLE_NZ", "0" * 30, 0), ("VLLM_ASCEND_ENABLE_NZ", "0" * 31, None),
    ("COMPILE_CUSTOM_KERNELS", "0" * 30, False), ("COMPILE_CUSTOM_KERNELS", "0" * 31, None),
    ("COMPILE_CUSTOM_KERNELS", "-1", True), ("COMPILE_CUSTOM_KERNELS", "2", True),
    ("COMPILE_CUSTOM_KERNELS", "0", False), ("COMPILE_CUSTOM_KERNELS", "On", True),
    ("COMPILE_CUSTOM_KERNELS", "no", False),
])
def test_env_ranges(name: str, text: str, value: object) -> None:
    var = BY_NAME[name]
    if value is None:
        with pytest.raises(EnvVarError):
            var.parse(text)
    else:
        assert var.parse(text) == value


@pytest.mark.parametrize(("bounds", "allowed"), [
    ((0, 4), "0, 1, 2, 3, 4"), ((0, 5), "an integer from 0 to 5"), ((3, 3), "3"),
    (None, "an integer")])
def test_int_allowed_wording(bounds: tuple[int, int] | None, allowed: str) -> None:
    assert EnvVar("X", "int", 0, "d", int_range=bounds).allowed() == allowed


def test_envs_name_is_resolved_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import ascend_config
    import ascend_config.envs as envs_module

    monkeypatch.delattr(ascend_config, "envs")  # as in a fresh interpreter
    assert ascend_config.envs is envs_module


def test_apply_env_changes_reports_what_it_did() -> None:
    environ = {"KEEP": "1", "GONE": "x", "SAME": "v"}
    done = apply_env_changes([EnvChange("GONE", None), EnvChange("ABSENT", None),
                              EnvChange("SAME", "v"), EnvChange("NEW", "n")], environ)
    assert done == ["unset GONE", "NEW=n"]
    assert environ == {"KEEP": "1", "SAME": "v", "NEW": "n"}


def test_envs_read_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_NZ", "2")
    assert envs.read("VLLM_ASCEND_ENABLE_NZ") == 2
    assert envs.read("VLLM_ASCEND_ENABLE_NZ", {}) == 1


def test_unknown_names_are_attribute_errors() -> None:
    import ascend_config
    from ascend_config.envs import read

    with pytest.raises(AttributeError) as info:
        read("NOT_A_VAR", {})
    assert str(info.value) == "unknown Ascend environment variable 'NOT_A_VAR'"
    with pytest.raises(AttributeError) as info:
        _ = ascend_config.nothing_here  # type: ignore[attr-defined]
    assert str(info.value) == "module 'ascend_config' has no attribute 'nothing_here'"
    assert ascend_config.envs is envs
    assert ascend_config.AscendConfig is AscendConfig

"""RL effects, batch invariance and env-var fallbacks: returned as values, never applied."""

from __future__ import annotations

import os
from typing import Any

import pytest
from ascend_config import EnvChange

RL = {"rl_config": {"enabled": True}}


def test_rl_enabled_effects(res: Any) -> None:
    cfg = res(RL)
    assert cfg.weight_nz_mode == 0 and cfg.refresh is True
    assert cfg.env_changes == (EnvChange("VLLM_ASCEND_ENABLE_NZ", "0"),
                               EnvChange("VLLM_SERVER_DEV_MODE", "1"))
    assert cfg.warnings == ("rl_config.enabled sets weight_nz_mode to 0 (was 1)",)
    assert not cfg.batch_invariant


def test_rl_no_warning_when_nz_already_off(res: Any) -> None:
    assert res({**RL, "weight_nz_mode": 0}).warnings == ()


def test_rl_disabled_has_no_side_effects(res: Any) -> None:
    cfg = res({"rl_config": {"enabled": False, "enable_batch_invariant": True}},
              env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert cfg.env_changes == () and cfg.weight_nz_mode == 1 and cfg.refresh is False


def test_rl_batch_invariant(res: Any) -> None:
    cfg = res({"rl_config": {"enabled": True, "enable_batch_invariant": True}})
    assert cfg.batch_invariant
    assert [c.name for c in cfg.env_changes] == [
        "VLLM_ASCEND_ENABLE_NZ", "VLLM_BATCH_INVARIANT", "VLLM_SERVER_DEV_MODE",
        "HCCL_DETERMINISTIC", "LCCL_DETERMINISTIC"]
    assert dict(cfg.env_changes)["HCCL_DETERMINISTIC"] == "strict"


def test_rl_dev_mode_forced_even_if_user_disabled(res: Any) -> None:
    cfg = res(RL, env={"VLLM_SERVER_DEV_MODE": "0", "VLLM_ASCEND_ENABLE_NZ": "0"})
    assert cfg.env_changes == (EnvChange("VLLM_SERVER_DEV_MODE", "1"),)


def test_rl_never_unsets_user_batch_invariant(res: Any) -> None:
    cfg = res(RL, env={"VLLM_BATCH_INVARIANT": "1"})
    assert "VLLM_BATCH_INVARIANT" not in dict(cfg.env_changes)
    assert cfg.batch_invariant  # the env var alone turns the mode on


@pytest.mark.parametrize(("before", "after"), [
    ("expandable_segments:True", None),
    ("expandable_segments:True,max_split_size_mb:256", "max_split_size_mb:256"),
    ("garbage_collection_threshold:0.6,expandable_segments:False",
     "garbage_collection_threshold:0.6"),
    ("my_expandable_segments:True", "my_expandable_segments:True"),
    ("a:1,expandable_segments:True,b:2", "a:1,b:2"),
    (" expandable_segments:True, b:2", " b:2"),
])
def test_rl_strips_expandable_segments(res: Any, before: str, after: str | None) -> None:
    changes = dict(res(RL, env={"PYTORCH_NPU_ALLOC_CONF": before}).env_changes)
    if after == before:
        assert "PYTORCH_NPU_ALLOC_CONF" not in changes
    else:
        assert changes["PYTORCH_NPU_ALLOC_CONF"] == after


def test_rl_unset_alloc_conf_stays_unset(res: Any) -> None:
    assert "PYTORCH_NPU_ALLOC_CONF" not in dict(res(RL).env_changes)


def test_batch_invariance_from_env_alone(res: Any) -> None:
    cfg = res({"weight_nz_mode": 2}, env={"VLLM_BATCH_INVARIANT": "1"})
    assert cfg.batch_invariant and cfg.weight_nz_mode == 0
    assert cfg.env_changes == (EnvChange("HCCL_DETERMINISTIC", "strict"),
                               EnvChange("LCCL_DETERMINISTIC", "1"))


def test_resolve_never_touches_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_config import resolve

    monkeypatch.setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    before = dict(os.environ)
    cfg = resolve({"rl_config": {"enabled": True, "enable_batch_invariant": True}})
    assert dict(os.environ) == before
    assert dict(cfg.env_changes)["PYTORCH_NPU_ALLOC_CONF"] is None
    env: dict[str, str] = dict(before)
    done = cfg.apply_env(env)
    assert "PYTORCH_NPU_ALLOC_CONF" not in env and env["VLLM_BATCH_INVARIANT"] == "1"
    assert "unset PYTORCH_NPU_ALLOC_CONF" in done


# --- env fallbacks ------------------------------------------------------------------------

FALLBACKS = [
    ("weight_nz_mode", "VLLM_ASCEND_ENABLE_NZ", "2", 2),
    ("enable_fused_mc2", "VLLM_ASCEND_ENABLE_FUSED_MC2", "1", 1),
    ("enable_mlapo", "VLLM_ASCEND_ENABLE_MLAPO", "0", False),
    ("msmonitor_use_daemon", "MSMONITOR_USE_DAEMON", "1", True),
    ("enable_transpose_kv_cache_by_block", "VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK",
     "0", False),
]


@pytest.mark.parametrize(("key", "var", "text", "value"), FALLBACKS)
def test_env_fallback_used_with_one_deprecation(
    res: Any, key: str, var: str, text: str, value: Any
) -> None:
    cfg = res(None, env={var: text})
    assert getattr(cfg, key) == value
    assert cfg.warnings == (
        f"'{key}' falls back to environment variable {var}; this fallback is deprecated and "
        f"will be removed in the next release, set '{key}' in additional_config instead",)


@pytest.mark.parametrize(("key", "var", "text", "value"), FALLBACKS)
def test_key_overrides_env_without_warning(
    res: Any, key: str, var: str, text: str, value: Any
) -> None:
    default = res(None).model_dump()[key]
    cfg = res({key: default}, env={var: text})
    assert getattr(cfg, key) == default and cfg.warnings == ()


@pytest.mark.parametrize(("var", "text"), [
    ("VLLM_ASCEND_ENABLE_NZ", "3"), ("VLLM_ASCEND_ENABLE_NZ", "on"),
    ("VLLM_ASCEND_ENABLE_FUSED_MC2", "2"), ("VLLM_ASCEND_ENABLE_MLAPO", "maybe")])
def test_invalid_env_value_is_a_problem(problems: Any, var: str, text: str) -> None:
    [(path, line)] = problems(None, env={var: text})
    assert path == f"env {var}" and f"given '{text}'" in line


def test_flashcomm_deprecated_from_key_and_env(res: Any) -> None:
    assert "FlashComm" in res({"enable_flashcomm1": True}).warnings[0]
    assert "FlashComm" in res(None, env={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}).warnings[0]

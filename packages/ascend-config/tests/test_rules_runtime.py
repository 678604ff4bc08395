"""The rules for how the engine runs (graph compilation and xlite, RL rollout, batch invariance),
each at, just below and just above its limit; effects come back as values and env changes.

Expected values are the existing vllm-ascend plugin's rules, worked out by hand; none is read
back from the code.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import EnvChange

from .rule_outcomes import ok, outcome

XLITE = {"xlite_graph_config": {"enabled": True}}


@pytest.mark.parametrize(("tokens", "allowed"), [(0, False), (1, True), (2, False)])
def test_xlite_speculative_tokens(tokens: int, allowed: bool) -> None:
    result = outcome(XLITE, speculative_method="mtp", num_speculative_tokens=tokens)
    if allowed:
        assert ok(result).xlite_graph_config.enabled is True
    else:
        assert result == ["xlite_graph_config.enabled"]
    # Without speculative decoding the token count does not matter.
    assert ok(outcome(XLITE, num_speculative_tokens=tokens)).xlite_graph_config.enabled


@pytest.mark.parametrize(("pp", "allowed"), [(1, True), (2, False)])
def test_xlite_pipeline_parallel(pp: int, allowed: bool) -> None:
    result = outcome(XLITE, pipeline_parallel_size=pp)
    assert (result == ["xlite_graph_config.enabled"]) is not allowed


@pytest.mark.parametrize(("block", "warns"), [(127, True), (128, False), (129, True)])
def test_xlite_block_size_warning(block: int, warns: bool) -> None:
    cfg = ok(outcome(XLITE, block_size=block))
    expected = (f"xlite_graph_config.enabled: block_size {block} is not 128; xlite is tuned "
                "for 128 (larger sizes are reduced to 128)",)
    assert cfg.warnings == (expected if warns else ())


@pytest.mark.parametrize(("mode", "warns"), [(0, False), (1, True), (2, True)])
def test_rl_forces_nz_off(mode: int, warns: bool) -> None:
    cfg = ok(outcome({"rl_config": {"enabled": True}, "weight_nz_mode": mode}))
    assert cfg.weight_nz_mode == 0
    expected = (f"rl_config.enabled sets weight_nz_mode to 0 (was {mode})",) if warns else ()
    assert cfg.warnings == expected


@pytest.mark.parametrize(("mode", "warns"), [(0, False), (1, True), (2, True)])
def test_batch_invariance_forces_nz_off(mode: int, warns: bool) -> None:
    cfg = ok(outcome({"weight_nz_mode": mode}, {"VLLM_BATCH_INVARIANT": "1"}))
    assert (cfg.weight_nz_mode, cfg.batch_invariant) == (0, True)
    expected = (f"batch invariance sets weight_nz_mode to 0 (was {mode})",) if warns else ()
    assert cfg.warnings == expected


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [p for p, _ in found]


def test_static_kernel_requires_npugraph_ex(problems: Any, res: Any) -> None:
    found = problems({"ascend_compilation_config": {"enable_static_kernel": True,
                                                    "enable_npugraph_ex": False}})
    assert paths(found) == ["ascend_compilation_config.enable_static_kernel"]
    comp = res({"ascend_compilation_config": {"enable_static_kernel": True}}
               ).ascend_compilation_config
    assert comp.enable_static_kernel and comp.enable_npugraph_ex


def test_310p_disables_both_with_two_warnings(res: Any) -> None:
    cfg = res({"ascend_compilation_config": {"enable_static_kernel": True,
                                             "enable_npugraph_ex": True}}, soc="310P")
    comp = cfg.ascend_compilation_config
    assert (comp.enable_npugraph_ex, comp.enable_static_kernel) == (False, False)
    assert cfg.warnings == (
        "ascend_compilation_config.enable_npugraph_ex is not supported on 310P; it is set to false",
        "ascend_compilation_config.enable_static_kernel is not supported on 310P; it is set to "
        "false",
    )


def test_310p_default_npugraph_ex_is_off_silently(res: Any) -> None:
    cfg = res(None, soc="310P")
    assert not cfg.ascend_compilation_config.enable_npugraph_ex and cfg.warnings == ()


def test_eager_mode_turns_graph_options_off(res: Any) -> None:
    comp = res(None, enforce_eager=True).ascend_compilation_config
    assert (comp.enable_npugraph_ex, comp.enable_static_kernel) == (False, False)
    assert comp.fuse_norm_quant


def test_xlite_rules(problems: Any, res: Any) -> None:
    on = {"xlite_graph_config": {"enabled": True}}
    assert res(on, speculative_method="eagle", num_speculative_tokens=1).xlite_graph_config.enabled
    found = problems(on, speculative_method="mtp", num_speculative_tokens=2,
                     pipeline_parallel_size=2)
    assert paths(found) == ["xlite_graph_config.enabled"] * 2
    cfg = res(on, block_size=256)
    assert len(cfg.warnings) == 1 and "block_size 256" in cfg.warnings[0]


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

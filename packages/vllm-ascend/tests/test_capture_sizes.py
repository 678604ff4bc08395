"""Capture-size updates (``update_cudagraph_capture_sizes``): sizes the user
listed that the parallel config cannot use are one clear error; dropping default sizes is a
warning naming them. The user's settings are recorded by the NPU platform's defaults hook."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from vllm_ascend.config_pipeline import compile_settings as cs
from vllm_ascend.engine.registry import reset_engines, user_capture_store
from vllm_ascend.process.process_setup import reset_process_setup


@pytest.fixture
def sp_config(make_vllm_config: Any) -> Any:
    """A TP=2 config with shared-expert DP (capture sizes must be multiples of 2)."""
    import ascend_config
    from vllm.config import CUDAGraphMode

    facts = ascend_config.DeploymentFacts(tensor_parallel_size=2, enable_expert_parallel=True)
    resolved = ascend_config.resolve({"enable_shared_expert_dp": True}, facts=facts)
    reset_process_setup()

    def build(user_sizes: list[int] | None, user_max: int | None,
              filled: list[int]) -> tuple[Any, Any]:
        from vllm_ascend.platform.npu import NPUPlatform

        cfg = make_vllm_config(tensor_parallel_size=2)
        cc = cfg.compilation_config
        cc.cudagraph_mode = CUDAGraphMode.PIECEWISE
        cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = user_sizes, user_max
        NPUPlatform.apply_config_platform_defaults(cfg)  # records what the user gave
        cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = filled, filled[-1]
        return cfg, resolved

    yield build
    reset_process_setup()


def test_user_sizes_the_parallel_config_cannot_use_are_one_error(sp_config: Any) -> None:
    cfg, resolved = sp_config([1, 2, 3, 4, 6], None, [1, 2, 3, 4, 6])
    with pytest.raises(ValueError) as info:
        cs.setup_compile_backend(cfg, resolved, "A2", environ={})
    message = str(info.value)
    assert "cudagraph_capture_sizes=[1, 2, 3, 4, 6] includes [1, 3]" in message
    assert "sequence parallelism with TP=2" in message
    assert "Allowed sizes here: [2, 4, 6]" in message


def test_user_sizes_that_all_fit_are_kept(sp_config: Any) -> None:
    cfg, resolved = sp_config([2, 4, 8], 8, [2, 4, 8])
    assert cs.setup_compile_backend(cfg, resolved, "A2", environ={}) == []
    assert cfg.compilation_config.cudagraph_capture_sizes == [2, 4, 8]


def test_default_sizes_are_truncated_with_one_warning_naming_them(sp_config: Any) -> None:
    cfg, resolved = sp_config(None, 5, [1, 2, 3, 4, 5])  # the user gave only a max
    notes = cs.setup_compile_backend(cfg, resolved, "A2", environ={})
    cc = cfg.compilation_config
    assert (cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size) == ([2, 4], 4)
    assert notes == ["capture sizes [1, 3, 5] dropped (sequence parallelism with TP=2 needs "
                     "multiples of 2); max_cudagraph_capture_size 5 -> 4"]


def test_a5_pruning_of_user_sizes_is_a_warning(make_vllm_config: Any) -> None:
    import ascend_config
    from vllm.config import CUDAGraphMode
    from vllm_ascend.platform.npu import NPUPlatform

    reset_process_setup()
    cfg = make_vllm_config()
    cc = cfg.compilation_config
    cc.cudagraph_mode = CUDAGraphMode.PIECEWISE
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4, 8, 16, 32], None
    NPUPlatform.apply_config_platform_defaults(cfg)
    cc.max_cudagraph_capture_size = 32
    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    notes = cs.setup_compile_backend(cfg, resolved, "A5", environ={})
    assert cc.cudagraph_capture_sizes == [1, 4, 8, 32]
    assert notes == ["capture sizes [2, 16] dropped (A5 captures at most 4 sizes); "
                     "max_cudagraph_capture_size 32 -> 32"]
    reset_process_setup()


def test_update_sorts_deduplicates_and_sets_the_max(make_vllm_config: Any) -> None:
    cc = make_vllm_config().compilation_config
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4], 4
    assert cs.update_cudagraph_capture_sizes(cc, [4, 2, 1, 2], reason="same") == []
    assert cs.update_cudagraph_capture_sizes(cc, [2], reason="why") == [
        "capture sizes [1, 4] dropped (why); max_cudagraph_capture_size 4 -> 2"]
    assert (cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size) == ([2], 2)
    user = cs.UserCaptureSettings(None, (2,))
    cs.update_cudagraph_capture_sizes(cc, [2, 6], reason="more", user=user,
                                      user_sizes_must_stay=True)  # nothing of the user's lost
    with pytest.raises(ValueError, match=r"includes \[2\], which cannot be used: gone"):
        cs.update_cudagraph_capture_sizes(cc, [6], reason="gone", user=user,
                                          user_sizes_must_stay=True)


def test_recorded_settings_belong_to_their_config(make_vllm_config: Any) -> None:
    reset_process_setup()
    a, b = make_vllm_config(), make_vllm_config()
    a.compilation_config.cudagraph_capture_sizes = [1, 2]
    a.compilation_config.max_cudagraph_capture_size = 2
    assert cs.record_user_capture_settings(a) == cs.UserCaptureSettings(2, (1, 2))
    assert cs.user_capture_settings(a) == cs.UserCaptureSettings(2, (1, 2))
    assert cs.user_capture_settings(b) == cs.UserCaptureSettings()
    reset_engines()  # what a fresh process holds: none of it
    assert cs.user_capture_settings(a) == cs.UserCaptureSettings()
    a.compilation_config.max_cudagraph_capture_size = 4
    cs.record_user_capture_settings(a)
    del a
    gc.collect()  # a freed config takes its settings with it
    assert len(user_capture_store()) == 0

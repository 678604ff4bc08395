"""init_batch_invariance and the batch-invariant CPU linear route."""

from __future__ import annotations

import os
import types

import pytest
import torch
from vllm_ascend.process import batch_invariance as bi

Change = types.SimpleNamespace


@pytest.fixture
def kernels_mode():
    from ascend_kernels import batch_invariant

    yield batch_invariant
    bi.disable_ascend_batch_invariance()


@pytest.fixture
def without_adjustments(ascend_cpu_platform):
    """Start without the two wrappers (an earlier in-process engine installs them) and put
    back whatever was installed before, so the tests hold in any order."""
    from vllm.model_executor.determinism import batch_invariant as vllm_bi
    from vllm.model_executor.layers import utils

    had_route = getattr(utils.dispatch_cpu_unquantized_gemm, "_ascend_route", False)
    had_handover = getattr(vllm_bi.init_batch_invariance, "_ascend_handover", False)
    bi.remove_cpu_linear_route()
    bi.remove_vllm_init_handover()
    yield
    if had_route:
        bi.install_cpu_linear_route()
    if had_handover:
        from vllm_ascend.engine.registry import published_ascend_config as current_ascend_config

        bi.install_vllm_init_handover(current_ascend_config)


def test_env_changes_set_and_unset() -> None:
    env = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    report = bi.apply_env_changes(
        [Change(name="HCCL_DETERMINISTIC", value="strict"),
         Change(name="PYTORCH_NPU_ALLOC_CONF", value=None), Change(name="GONE", value=None)],
        env)
    assert env == {"HCCL_DETERMINISTIC": "strict"}
    assert report.env_set == {"HCCL_DETERMINISTIC": "strict"}
    assert report.env_unset == ["PYTORCH_NPU_ALLOC_CONF"]


@pytest.mark.parametrize(
    ("changes", "env", "enabled"),
    [([Change(name="VLLM_BATCH_INVARIANT", value="1")], {}, True),
     ([], {"VLLM_BATCH_INVARIANT": "1"}, True),
     ([], {}, False), ([], {"VLLM_BATCH_INVARIANT": "0"}, False)],
)
def test_mode_follows_vllm(kernels_mode, changes, env, enabled) -> None:
    report = bi.init_batch_invariance(types.SimpleNamespace(env_changes=changes), env)
    assert report.mode_enabled is enabled
    assert kernels_mode.is_batch_invariant_mode_enabled() is enabled


def test_resolved_config_drives_it(kernels_mode) -> None:
    import ascend_config

    rl = {"rl_config": {"enabled": True, "enable_batch_invariant": True}}
    cfg = ascend_config.resolve(rl, facts=ascend_config.DeploymentFacts(soc="cpu"), environ={})
    env: dict[str, str] = {}
    assert bi.init_batch_invariance(cfg, env).mode_enabled
    assert env["VLLM_BATCH_INVARIANT"] == "1" and env["HCCL_DETERMINISTIC"] == "strict"


def test_worker_overrides_apply_the_published_config(monkeypatch) -> None:
    import ascend_config
    from vllm_ascend.base.config_channel import publish_worker_inputs
    from vllm_ascend.engine.resolution import resolve_published

    rl = {"rl_config": {"enabled": True, "enable_batch_invariant": True}}
    facts = ascend_config.DeploymentFacts(soc="A2")
    env: dict[str, str] = {}
    assert publish_worker_inputs("A2", rl, facts, {}, env)
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        names = bi.apply_worker_overrides(resolve_published(env)[1], env)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    assert {"HCCL_DETERMINISTIC", "LCCL_DETERMINISTIC", "VLLM_BATCH_INVARIANT"} <= set(names)
    assert (env["HCCL_DETERMINISTIC"], env["LCCL_DETERMINISTIC"]) == ("strict", "1")
    assert bi.apply_worker_overrides(None, {}) == []  # nothing published: no env change
    torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])


def test_cpu_linear_route(without_adjustments, kernels_mode) -> None:
    from vllm.model_executor.layers import utils

    original = utils.dispatch_cpu_unquantized_gemm
    try:
        assert bi.install_cpu_linear_route() is True
        assert bi.install_cpu_linear_route() is False
        kernels_mode.enable_batch_invariant_mode()
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(8, 16), requires_grad=False)
        utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
        assert layer.weight.shape == (8, 16)  # kept: the batch-invariant linear needs it
        kernels_mode.reset_call_counts()
        x = torch.randn(3, 16)
        out = utils.cpu_unquantized_gemm(layer, x, layer.weight, None)
        assert torch.allclose(out, x @ layer.weight.T, atol=1e-5)
        assert sum(kernels_mode.call_counts().values()) >= 1
        kernels_mode.disable_batch_invariant_mode()
        plain = torch.nn.Module()
        plain.weight = torch.nn.Parameter(torch.randn(8, 16), requires_grad=False)
        utils.dispatch_cpu_unquantized_gemm(plain, remove_weight=False)
        assert plain.cpu_linear is not None
    finally:
        bi.remove_cpu_linear_route()
    assert utils.dispatch_cpu_unquantized_gemm is original


def test_vllm_worker_hook_enables_the_ascend_mode(without_adjustments, kernels_mode,
                                                  monkeypatch) -> None:
    from vllm.model_executor.determinism import batch_invariant as vllm_bi

    original = vllm_bi.init_batch_invariance
    saved_env = dict(os.environ)  # vLLM's overrides write NCCL/CUBLAS variables
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        published = types.SimpleNamespace(env_changes=[Change(name="HCCL_DETERMINISTIC",
                                                              value="strict")])
        assert bi.install_vllm_init_handover(lambda: published) is True
        assert bi.install_vllm_init_handover(lambda: None) is False
        monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
        vllm_bi.init_batch_invariance()
        assert not kernels_mode.is_batch_invariant_mode_enabled()
        monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
        monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
        vllm_bi.init_batch_invariance()  # what vLLM's CPU worker calls at start-up
        assert kernels_mode.is_batch_invariant_mode_enabled()
        assert not vllm_bi._batch_invariant_MODE  # vLLM's Triton kernels stay off
        assert os.environ["VLLM_USE_AOT_COMPILE"] == "0"  # vLLM's env overrides kept
        assert torch.are_deterministic_algorithms_enabled()  # the Ascend worker override
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ["HCCL_DETERMINISTIC"] == "strict"  # the injected config's change
    finally:
        bi.remove_vllm_init_handover()
        os.environ.clear()
        os.environ.update(saved_env)
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    assert vllm_bi.init_batch_invariance is original

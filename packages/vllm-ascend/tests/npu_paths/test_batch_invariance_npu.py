"""Batch invariance on the NPU path (the seam's torch_npu kernels): the fused AddRmsNorm kernel is
never reached in the mode, and vllm-ascend's custom kernels are off in the mode and on A5."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ascend_config
import pytest
import torch
from vllm_ascend.ops.custom_kernels import custom_kernels_allowed, enable_custom_op
from vllm_ascend.process import batch_invariance as bi

A = torch.ops.ascend


@pytest.fixture
def mode() -> Iterator[None]:
    yield
    bi.disable_ascend_batch_invariance()


def test_add_rms_norm_never_reaches_npu_add_rms_norm_in_the_mode(
    npu_kernels_on_cpu: Any, mode: None
) -> None:
    from ascend_kernels import batch_invariant

    x, r, w = torch.randn(3, 16), torch.randn(3, 16), torch.randn(16)
    A.add_rms_norm(x, r, w, 1e-6)
    assert npu_kernels_on_cpu.counts == {"npu_add_rms_norm": 1}  # the fused kernel, outside

    report = bi.init_batch_invariance(ascend_config.resolve(
        {"rl_config": {"enabled": True, "enable_batch_invariant": True}},
        facts=ascend_config.DeploymentFacts(soc="A2"), environ={}), environ={})
    assert report.mode_enabled and not report.custom_kernels
    batch_invariant.reset_call_counts()
    out, residual = A.add_rms_norm(x, r, w, 1e-6)
    out_b, _ = A.add_rms_norm(x, r, w, 1e-6, torch.full((16,), 0.5))
    assert npu_kernels_on_cpu.counts == {"npu_add_rms_norm": 1, "npu_rms_norm": 2}
    assert batch_invariant.call_counts()["add_rms_norm"] == 2
    assert torch.equal(residual, x + r)  # the plain add, then npu_rms_norm's output
    norm = npu_kernels_on_cpu.fake.kernels.marker("npu_rms_norm", 0)  # its output's fill
    assert torch.equal(out, torch.full((3, 16), float(norm)))
    assert torch.equal(out_b, torch.full((3, 16), norm + 0.5))

    bi.disable_ascend_batch_invariance()
    A.add_rms_norm(x, r, w, 1e-6)
    assert npu_kernels_on_cpu.counts["npu_add_rms_norm"] == 2  # the fused kernel is back


def test_gemma_norm_layer_in_the_mode_uses_plain_rms_norm(
    npu_kernels_on_cpu: Any, mode: None, ascend_cpu_platform: Any
) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm
    from vllm_ascend.engine.registry import published_ascend_config as current_ascend_config
    from vllm_ascend.process import compat_adjustments

    compat_adjustments.apply_compat_adjustments("cpu", config=current_ascend_config)
    bi.enable_ascend_batch_invariance()
    with set_current_vllm_config(VllmConfig()):
        layer = GemmaRMSNorm(16)
        layer.forward_oot(torch.randn(2, 16), torch.randn(2, 16))
    assert npu_kernels_on_cpu.counts == {"npu_rms_norm": 1}


class _Extension:
    def __init__(self, loads: bool) -> None:
        self.loads, self.calls = loads, 0

    def load(self) -> bool:
        self.calls += 1
        return self.loads


@pytest.mark.parametrize(
    ("soc", "additional", "expected"),
    [
        ("A2", {}, True),
        ("A3", {}, True),
        ("A5", {}, False),  # the reference disables the extension on A5
        ("cpu", {}, False),
        ("A2", {"rl_config": {"enabled": True, "enable_batch_invariant": True}}, False),
    ],
)
def test_enable_custom_op(soc: str, additional: dict[str, Any], expected: bool) -> None:
    cfg = ascend_config.resolve(additional, facts=ascend_config.DeploymentFacts(soc=soc),
                                environ={})
    extension = _Extension(loads=True)
    assert enable_custom_op(cfg, extension) is expected
    assert extension.calls == (1 if expected else 0)  # never loaded where it is off
    assert custom_kernels_allowed(cfg)[0] is expected


def test_enable_custom_op_follows_the_env_switch_and_a_failed_load() -> None:
    invariant = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts(soc="A2"),
                                      environ={"VLLM_BATCH_INVARIANT": "1"})
    assert enable_custom_op(invariant, _Extension(loads=True)) is False
    plain = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts(soc="A2"), environ={})
    assert enable_custom_op(plain, _Extension(loads=False)) is False
    assert "batch-invariant" in custom_kernels_allowed(invariant)[1]

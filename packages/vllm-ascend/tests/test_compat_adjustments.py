"""Every compatibility adjustment: listed with a reason, idempotent, and doing its job."""

from __future__ import annotations

import pytest
import torch
from vllm_ascend.engine.registry import published_ascend_config as current_ascend_config
from vllm_ascend.process import compat_adjustments as ca


def test_each_adjustment_has_a_reason() -> None:
    names = [a.name for a in ca.ADJUSTMENTS]
    assert names == ["host_cpu_amx_permission", "ascend_ir_provider", "ascend_custom_ops",
                     "cpu_linear_batch_invariant_route", "vllm_batch_invariance_handover",
                     "serve_single_api_server"]
    assert all(len(a.reason) > 40 for a in ca.ADJUSTMENTS)


def test_apply_is_idempotent_and_soc_aware(ascend_cpu_platform) -> None:
    cfg = current_ascend_config
    assert ca.apply_compat_adjustments("cpu", config=cfg) == ca.apply_compat_adjustments(
        "cpu", config=cfg)
    assert "cpu_linear_batch_invariant_route" not in ca.apply_compat_adjustments(
        "A2", config=cfg)
    # A command's row is that command's alone: plugin load in any process never applies it.
    assert all("serve_single_api_server" not in ca.apply_compat_adjustments(soc, config=cfg)
               for soc in ("A2", "A3", "A5", "310P", "cpu"))


def test_serve_command_replaces_vllms_single_api_server_runner() -> None:
    import inspect

    import vllm.entrypoints.cli.serve as serve_cli
    from vllm.entrypoints.launchers.api_server.entry import run_server as vllm_run_server

    assert serve_cli.run_server is vllm_run_server
    try:
        assert ca.apply_command_adjustments("serve") == ["serve_single_api_server"]
        replaced = serve_cli.run_server
        assert replaced is not vllm_run_server and inspect.iscoroutinefunction(replaced)
        ca.apply_command_adjustments("serve")  # idempotent: never wrapped twice
        assert serve_cli.run_server is replaced
        assert ca.apply_command_adjustments("demo") == []
    finally:
        ca.reset_compat_adjustments()
    assert serve_cli.run_server is vllm_run_server


def test_ir_provider_runs_ascend_kernels(ascend_cpu_platform) -> None:
    from vllm import ir
    from vllm_ascend.ops.ir_provider import register_ascend_ir_provider

    ca.apply_compat_adjustments("cpu", config=current_ascend_config)
    assert register_ascend_ir_provider() is False  # already registered
    x, w, r = torch.randn(3, 64), torch.randn(64), torch.randn(3, 64)
    ascend = ir.ops.rms_norm.impls["ascend"]
    native = ir.ops.rms_norm.impls["native"]
    assert torch.allclose(ascend.impl_fn(x, w, 1e-6), native.impl_fn(x, w, 1e-6), atol=1e-5)
    assert not ascend.supports_args(x, None, 1e-6)  # no weight: left to native
    fused = ir.ops.fused_add_rms_norm.impls["ascend"].impl_fn(x, r, w, 1e-6)
    ref = ir.ops.fused_add_rms_norm.impls["native"].impl_fn(x, r, w, 1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fused, ref, strict=True))


def test_rotary_embedding_is_replaced(ascend_cpu_platform) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
    from vllm_ascend.ops.custom_ops import AscendRotaryEmbedding, register_ascend_custom_ops

    ca.apply_compat_adjustments("cpu", config=current_ascend_config)
    assert op_registry_oot["RotaryEmbedding"] is AscendRotaryEmbedding
    assert register_ascend_custom_ops() == []
    with set_current_vllm_config(VllmConfig()):
        rope = RotaryEmbedding(64, 64, 256, 10000.0, True, torch.float32)
        assert type(rope) is AscendRotaryEmbedding
        pos = torch.tensor([0, 3, 7])
        q, k = torch.randn(3, 4 * 64), torch.randn(3, 2 * 64)
        got = rope.forward_cpu(pos, q.clone(), k.clone())
        ref = rope.forward_native(pos, q.clone(), k.clone())
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, ref, strict=True))


def test_reset_and_conflicts(ascend_cpu_platform) -> None:
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm_ascend.ops.custom_ops import register_ascend_custom_ops

    ca.reset_compat_adjustments()
    assert "RotaryEmbedding" not in op_registry_oot
    op_registry_oot["RotaryEmbedding"] = object  # someone else's replacement
    try:
        with pytest.raises(RuntimeError, match="already replaced"):
            register_ascend_custom_ops()
    finally:
        del op_registry_oot["RotaryEmbedding"]
    assert ca.apply_compat_adjustments("cpu", config=current_ascend_config)

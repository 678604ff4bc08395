"""Ops whose CANN aclnn entry point is missing are routed to their reference
(platform.kernel_routing), with one warning naming the CANN release that has them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from ascend_kernels.npu_loader import NpuRegistration
from vllm_ascend.platform.kernel_routing import missing_entry_points, route_missing_kernels

from .doctor_trees import ALL_ACLNN, write_elf


def has_npu_kernel(op: str) -> bool:
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"ascend::{op}", "PrivateUse1"))


def toolkit(tmp_path: Path, exported: list[str]) -> dict[str, str]:
    home = tmp_path / "cann"
    write_elf(home / "lib64" / "libopapi.so", exported)
    return {"ASCEND_TOOLKIT_HOME": str(home), "HOME": str(tmp_path)}


def test_missing_entry_points_reroute_their_ops_once(fake_torch_npu, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    import sys

    registration = NpuRegistration()
    registration.load(sys.modules["torch_npu"])
    try:
        assert has_npu_kernel("rms_norm") and has_npu_kernel("add_rms_norm")
        env = toolkit(tmp_path, [n for n in ALL_ACLNN if n != "aclnnRmsNorm"])
        with caplog.at_level(logging.WARNING, "vllm_ascend.platform.kernel_routing"):
            missing = route_missing_kernels(sys.modules["torch_npu"], registration, env)
            assert route_missing_kernels(sys.modules["torch_npu"], registration, env) == missing
        assert missing == {"rms_norm": ("aclnnRmsNorm",),
                           "split_qkv_rmsnorm_rope": ("aclnnRmsNorm",)}
        assert not has_npu_kernel("rms_norm") and not has_npu_kernel("split_qkv_rmsnorm_rope")
        assert has_npu_kernel("add_rms_norm")  # its entry point is there
        [record] = caplog.records  # one warning, however often the platform asks
        assert "ascend::rms_norm (RMSNorm of every model) needs aclnnRmsNorm" in record.message
        assert "CANN 9.1.0 has them" in record.message
    finally:
        registration.reset()


def test_the_attention_ops_fall_back_when_their_entry_points_are_missing(
        fake_torch_npu, tmp_path: Path) -> None:
    import sys

    registration = NpuRegistration()
    registration.load(sys.modules["torch_npu"])
    try:
        assert has_npu_kernel("paged_attention") and has_npu_kernel("reshape_and_cache")
        gone = {"aclnnFusedInferAttentionScoreV4", "aclnnScatterPaKvCache"}
        env = toolkit(tmp_path, [n for n in ALL_ACLNN if n not in gone])
        missing = route_missing_kernels(sys.modules["torch_npu"], registration, env)
        assert missing == {"paged_attention": ("aclnnFusedInferAttentionScoreV4",),
                           "reshape_and_cache": ("aclnnScatterPaKvCache",)}
        assert not has_npu_kernel("paged_attention") and not has_npu_kernel("reshape_and_cache")
        assert has_npu_kernel("rms_norm")
    finally:
        registration.reset()


def test_nothing_is_rerouted_when_every_entry_point_is_there(tmp_path: Path) -> None:
    assert missing_entry_points(toolkit(tmp_path, ALL_ACLNN)) == {}
    assert missing_entry_points(toolkit(tmp_path / "b", ALL_ACLNN[1:])) != {}

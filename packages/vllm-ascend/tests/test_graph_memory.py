"""``npu_runtime.graph_memory``: the per-token estimate of the graphs' memory and the report
after capture. Expected figures are worked out by hand in each test."""

from __future__ import annotations

from vllm_ascend.npu_runtime.graph_memory import (
    CaptureSample,
    GraphMemoryReport,
    scaled_estimate,
)

MIB = 1 << 20


def test_scaled_estimate_counts_further_graphs_at_the_second_captures_bytes_per_token() -> None:
    # FULL sizes 16, 8, 4, 2, 1: the first capture took 20 MiB, the second (8 tokens) 8 MiB,
    # so 1 MiB per token: 20 + (8 + 4 + 2 + 1) * 1 * 1.1 = 36.5 MiB (a tenth on the further
    # graphs). vLLM's figure: 20 + 4 * 8 = 52.
    samples = [CaptureSample("FULL", 16, 20 * MIB), CaptureSample("FULL", 8, 8 * MIB)]
    assert scaled_estimate(samples, {"FULL": [16, 8, 4, 2, 1]}) == int(36.5 * MIB)


def test_scaled_estimate_overlays_the_first_captures_of_two_modes() -> None:
    # PIECEWISE: first 10 MiB, second (4 tokens) 2 MiB -> 0.5 MiB/token x (4 + 2) = 3 MiB.
    # FULL: first 6 MiB, second (2 tokens) 1 MiB -> 0.5 MiB/token x (2 + 1) = 1.5 MiB.
    # The first captures share the pool: max(10, 6) + (3 + 1.5) * 1.1 = 14.95 MiB.
    samples = [CaptureSample("PIECEWISE", 8, 10 * MIB), CaptureSample("PIECEWISE", 4, 2 * MIB),
               CaptureSample("FULL", 4, 6 * MIB), CaptureSample("FULL", 2, 1 * MIB)]
    sizes = {"PIECEWISE": [8, 4, 2], "FULL": [4, 2, 1]}
    assert scaled_estimate(samples, sizes) == int(14.95 * MIB)


def test_scaled_estimate_of_one_size_is_its_capture_and_of_no_sample_zero() -> None:
    assert scaled_estimate([CaptureSample("FULL", 8, 3 * MIB)], {"FULL": [8]}) == 3 * MIB
    assert scaled_estimate([], {"FULL": [8, 4]}) == 0
    # A capture that freed memory (a pool reusing blocks) counts as nothing, never negative.
    samples = [CaptureSample("FULL", 8, 3 * MIB), CaptureSample("FULL", 4, -MIB)]
    assert scaled_estimate(samples, {"FULL": [8, 4, 2]}) == 3 * MIB


def test_graph_memory_report_counts_the_blocks_vllms_extrapolation_would_have_taken() -> None:
    # 52 MiB - 35 MiB = 17 MiB at 1.5 MiB a block: 11 whole blocks.
    report = GraphMemoryReport(estimate=35 * MIB, vllm_estimate=52 * MIB, measured=33 * MIB,
                               kv_blocks=100, block_bytes=3 * MIB // 2)
    assert report.blocks_gained == 11
    assert "100 blocks" in report.message() and "11 more" in report.message()
    assert report.shortfall() is None
    over = GraphMemoryReport(estimate=30 * MIB, vllm_estimate=52 * MIB, measured=33 * MIB,
                             kv_blocks=100, block_bytes=MIB)
    warning = over.shortfall()
    assert warning is not None and "3.00 MiB more than estimated" in warning

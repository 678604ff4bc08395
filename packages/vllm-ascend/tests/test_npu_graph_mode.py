"""The NPU runtime's graph-mode choice and the padding rule of its attention metadata (graphs
themselves run in tests/integration/test_npu_graphs.py on the emulated device)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from vllm.config import CompilationMode, CUDAGraphMode
from vllm_ascend.config_pipeline.workers import choose_graph_mode
from vllm_ascend.npu_runtime.attention.metadata import without_padding_queries


def _config(mode: CUDAGraphMode | None, compile_mode: CompilationMode,
            eager: bool = False, ranks: int = 1, stages: int = 1) -> Any:
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(enforce_eager=eager),
        parallel_config=types.SimpleNamespace(world_size=ranks * stages,
                                              pipeline_parallel_size=stages),
        compilation_config=types.SimpleNamespace(cudagraph_mode=mode, mode=compile_mode,
                                                 splitting_ops=["vllm::x"]),
        kernel_config=types.SimpleNamespace(enable_jit_warmup=True),
    )


def test_the_default_full_and_piecewise_with_compilation_is_kept_and_logged() -> None:
    config = _config(CUDAGraphMode.FULL_AND_PIECEWISE, CompilationMode.VLLM_COMPILE)
    note = choose_graph_mode(config)
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_AND_PIECEWISE
    assert note is not None and "FULL_AND_PIECEWISE" in note
    assert config.kernel_config.enable_jit_warmup is False  # Triton's warm-up stays off


@pytest.mark.parametrize("mode", [CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL_AND_PIECEWISE])
def test_a_piecewise_mode_without_compilation_becomes_full_decode_only(mode) -> None:
    config = _config(mode, CompilationMode.NONE)
    note = choose_graph_mode(config)
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
    assert config.compilation_config.splitting_ops == []
    assert note is not None and mode.name in note and "FULL_DECODE_ONLY" in note


def test_full_decode_only_without_compilation_is_kept() -> None:
    config = _config(CUDAGraphMode.FULL_DECODE_ONLY, CompilationMode.NONE)
    choose_graph_mode(config)
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
    assert config.compilation_config.splitting_ops == ["vllm::x"]


@pytest.mark.parametrize("eager,mode", [(True, CUDAGraphMode.FULL_AND_PIECEWISE),
                                        (False, CUDAGraphMode.NONE)])
def test_eager_requests_change_nothing(eager, mode) -> None:
    config = _config(mode, CompilationMode.NONE, eager=eager)
    assert choose_graph_mode(config) is None
    assert config.compilation_config.cudagraph_mode == mode


def test_trailing_padding_requests_get_no_query_tokens() -> None:
    # 3 real decodes padded to a graph of 4 requests: vLLM's padded row has KV length 0 and
    # would own token 3; it must own none (the row is padding the kernel leaves at zero).
    assert without_padding_queries([1, 2, 3, 4], [7, 9, 5, 0]) == [1, 2, 3, 3]
    assert without_padding_queries([1, 2, 3, 4], [7, 9, 5, 1]) == [1, 2, 3, 4]  # all real
    assert without_padding_queries([1, 2], [0, 0]) == [0, 0]  # nothing real


@pytest.mark.parametrize("ranks", [1, 2])
def test_tensor_parallel_ranks_keep_their_graphs(ranks) -> None:
    config = _config(CUDAGraphMode.FULL_DECODE_ONLY, CompilationMode.NONE, ranks=ranks)
    note = choose_graph_mode(config)
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
    assert note is not None and "runs eagerly" not in note


@pytest.mark.parametrize(("ranks", "expected"), [(1, CUDAGraphMode.FULL_DECODE_ONLY),
                                                 (2, CUDAGraphMode.NONE)])
def test_expert_parallel_ranks_run_eagerly_with_one_line_naming_the_all_to_all(
    ranks, expected
) -> None:
    config = _config(CUDAGraphMode.FULL_DECODE_ONLY, CompilationMode.NONE, ranks=ranks)
    config.parallel_config.enable_expert_parallel = True
    note = choose_graph_mode(config)
    assert config.compilation_config.cudagraph_mode == expected
    assert note is not None
    assert ("all-to-all" in note and "runs eagerly" in note) == (ranks > 1)


@pytest.mark.parametrize(("stages", "expected"), [(1, CUDAGraphMode.FULL_DECODE_ONLY),
                                                  (2, CUDAGraphMode.NONE)])
def test_pipeline_stages_run_eagerly_with_one_line_naming_the_send_recv(
    stages, expected
) -> None:
    config = _config(CUDAGraphMode.FULL_DECODE_ONLY, CompilationMode.NONE, stages=stages)
    note = choose_graph_mode(config)
    assert config.compilation_config.cudagraph_mode == expected
    assert note is not None
    assert ("send/recv" in note and "runs eagerly" in note) == (stages > 1)

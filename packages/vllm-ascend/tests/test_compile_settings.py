"""The compilation settings of the config pipeline (``config_pipeline.compile_settings``): the
NPU pipeline's default capture size, A5 pruning and sequence-parallel alignment as pure rules,
then its compilation mode and compile backend on real VllmConfigs (capture-size updates and the
decode-batch cover have files of their own: test_capture_sizes.py,
test_decode_capture_coverage.py)."""

from __future__ import annotations

import pytest
from vllm_ascend.config_pipeline import compile_settings


@pytest.mark.parametrize(
    ("args", "expected"),
    [((40, 3, None, None), 160), ((200, 3, None, None), 512), ((8, 0, None, None), 8),
     ((40, 3, 64, None), None), ((40, 3, None, [1, 2, 4]), None), ((None, 0, None, None), None)],
)
def test_default_max_capture_size(args, expected) -> None:
    assert compile_settings.default_max_capture_size(*args) == expected


def test_prune_capture_sizes_for_a5() -> None:
    assert compile_settings.prune_capture_sizes(list(range(1, 11))) == [1, 4, 7, 10]
    assert compile_settings.prune_capture_sizes([1, 2, 4]) == [1, 2, 4]


def test_sequence_parallel_alignment() -> None:
    assert compile_settings.sp_capture_sizes([1, 2, 4, 6, 8, 12], 4) == [4, 8, 12]
    need = compile_settings.needs_sp_alignment
    assert need(2, False, False, True, False, False)
    assert need(2, False, False, False, True, False) and need(2, False, False, False, False, True)
    assert not need(1, False, False, True, True, True)  # TP 1
    assert not need(2, True, False, True, False, False)  # no graphs
    assert not need(2, False, True, True, False, False)  # eager
    assert not need(2, False, False, False, False, False)  # no SP-like feature


def test_compilation_mode_rules_on_real_configs(make_vllm_config, caplog) -> None:
    import ascend_config
    from vllm.config import CompilationMode

    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    eager = make_vllm_config(enforce_eager=True)
    eager.compilation_config.splitting_ops = None
    eager.compilation_config.mode = CompilationMode.VLLM_COMPILE
    compile_settings.update_compilation_mode(eager, resolved)
    assert eager.compilation_config.mode == CompilationMode.NONE
    assert eager.compilation_config.splitting_ops == []
    odd = make_vllm_config()
    odd.compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE
    notes = compile_settings.update_compilation_mode(odd, resolved)
    assert odd.compilation_config.mode == CompilationMode.NONE and "not supported" in notes[0]


def test_compile_backend_rules_on_real_configs(make_vllm_config) -> None:
    import ascend_config
    from vllm.config import CompilationMode, CUDAGraphMode

    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    none = make_vllm_config()
    none.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    compile_settings.setup_compile_backend(none, resolved, "A2", environ={})
    assert none.compilation_config.mode == CompilationMode.NONE
    assert none.compilation_config.backend == compile_settings.COMPILER_PATH
    piece = make_vllm_config()
    piece.compilation_config.splitting_ops = None  # as on an NPU host (the CPU platform: [])
    piece.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE
    piece.compilation_config.cudagraph_capture_sizes = [1, 2, 4, 8, 16, 32]
    piece.compilation_config.max_cudagraph_capture_size = 32
    compile_settings.setup_compile_backend(piece, resolved, "A5", environ={})
    assert "vllm::mla_forward" in piece.compilation_config.splitting_ops
    assert len(piece.compilation_config.cudagraph_capture_sizes) <= 4
    blocked = make_vllm_config()
    blocked.compilation_config.splitting_ops = None  # as on an NPU host (the CPU platform: [])
    blocked.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE
    blocked.compilation_config.cudagraph_capture_sizes = [1, 2, 4]
    blocked.compilation_config.max_cudagraph_capture_size = 4
    with pytest.raises(ValueError, match="ASCEND_LAUNCH_BLOCKING"):
        compile_settings.setup_compile_backend(blocked, resolved, "A2",
                                              environ={"ASCEND_LAUNCH_BLOCKING": "1"})


@pytest.mark.parametrize(
    ("graph_mode", "compile_mode", "expected"),
    [("FULL", "VLLM_COMPILE", "PIECEWISE"), ("FULL_DECODE_ONLY", "VLLM_COMPILE", "PIECEWISE"),
     ("FULL_AND_PIECEWISE", "VLLM_COMPILE", "PIECEWISE"), ("FULL", "NONE", "NONE"),
     ("FULL_AND_PIECEWISE", "NONE", "NONE"), ("PIECEWISE", "VLLM_COMPILE", "PIECEWISE"),
     ("NONE", "VLLM_COMPILE", "NONE")],
)
def test_encoder_decoder_graph_mode_on_real_configs(make_vllm_config, graph_mode, compile_mode,
                                                    expected) -> None:
    import ascend_config
    from vllm.config import CompilationMode, CUDAGraphMode

    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    cfg = make_vllm_config()
    # is_encoder_decoder is a cached property of the real ModelConfig: set its cached value.
    cfg.model_config.__dict__["is_encoder_decoder"] = True
    cfg.compilation_config.mode = CompilationMode[compile_mode]
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode[graph_mode]
    notes = compile_settings.update_compilation_mode(cfg, resolved)
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode[expected]
    changed = graph_mode not in ("NONE", "PIECEWISE")
    assert any("encoder-decoder" in n for n in notes) == changed
    decoder_only = make_vllm_config()
    decoder_only.compilation_config.cudagraph_mode = CUDAGraphMode[graph_mode]
    compile_settings.update_compilation_mode(decoder_only, resolved)
    assert decoder_only.compilation_config.cudagraph_mode == CUDAGraphMode[graph_mode]


@pytest.mark.parametrize(
    ("full_mode", "with_spec", "eager", "graph_mode"),
    [(True, False, True, "NONE"), (True, True, False, "FULL_DECODE_ONLY"),
     (False, False, False, "FULL_DECODE_ONLY")],
)
def test_xlite_graph_modes_on_real_configs(make_vllm_config, tiny_qwen3, full_mode, with_spec,
                                           eager, graph_mode) -> None:
    import ascend_config
    from vllm.config import CUDAGraphMode

    spec = {"speculative_config": {"method": "draft_model", "model": str(tiny_qwen3),
                                   "num_speculative_tokens": 1}} if with_spec else {}
    cfg = make_vllm_config(**spec)
    resolved = ascend_config.resolve(
        {"xlite_graph_config": {"enabled": True, "full_mode": full_mode}},
        facts=ascend_config.DeploymentFacts(speculative_method="draft_model" if with_spec else
                                            None, num_speculative_tokens=int(with_spec)))
    compile_settings.update_compilation_mode(cfg, resolved)
    assert cfg.model_config.enforce_eager is eager
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode[graph_mode]


def test_compile_backend_graph_mode_branches(make_vllm_config) -> None:
    import ascend_config
    from vllm.config import CompilationMode, CUDAGraphMode

    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    def graph_config(mode):
        cfg = make_vllm_config()
        cc = cfg.compilation_config
        cc.cudagraph_mode = mode
        cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4], 4
        return cfg

    full = graph_config(CUDAGraphMode.FULL_DECODE_ONLY)
    full.compilation_config.cudagraph_num_of_warmups = 3
    compile_settings.setup_compile_backend(full, resolved, "A2", environ={})
    assert full.compilation_config.splitting_ops == []  # full graphs: no piecewise split
    assert full.compilation_config.cudagraph_num_of_warmups == 1
    assert full.compilation_config.mode == CompilationMode.VLLM_COMPILE
    piece = graph_config(CUDAGraphMode.FULL_AND_PIECEWISE)
    piece.compilation_config.mode = CompilationMode.NONE
    with pytest.raises(ValueError, match="needs compilation mode VLLM_COMPILE"):
        compile_settings.setup_compile_backend(piece, resolved, "A2", environ={})


def test_sequence_parallel_capture_sizes_on_real_configs(make_vllm_config) -> None:
    import ascend_config
    from vllm.config import CUDAGraphMode

    facts = ascend_config.DeploymentFacts(tensor_parallel_size=2, enable_expert_parallel=True)
    resolved = ascend_config.resolve({"enable_shared_expert_dp": True}, facts=facts)
    assert resolved.enable_shared_expert_dp is True

    def graph_config(sizes):
        cfg = make_vllm_config(tensor_parallel_size=2)
        cc = cfg.compilation_config
        cc.cudagraph_mode = CUDAGraphMode.PIECEWISE
        cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = sizes, sizes[-1]
        return cfg

    kept = graph_config([1, 2, 3, 4, 6])
    notes = compile_settings.setup_compile_backend(kept, resolved, "A2", environ={})
    assert kept.compilation_config.cudagraph_capture_sizes == [2, 4, 6]
    assert kept.compilation_config.max_cudagraph_capture_size == 6
    assert any("sequence parallelism" in n for n in notes)
    with pytest.raises(ValueError, match="multiples of TP"):
        compile_settings.setup_compile_backend(graph_config([1, 3]), resolved, "A2", environ={})

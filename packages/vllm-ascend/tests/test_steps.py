"""The config pipeline steps: pure rules, the steps on real VllmConfigs, and the msprobe dump
config they write."""

from __future__ import annotations

import argparse
import json
import logging
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.config_pipeline import (
    allocator_env,
    derived_edits,
    gpu_fixes,
    kv_engine_id,
    npu_compilation,
    selection,
)


@pytest.mark.parametrize(
    ("args", "expected"),
    [((40, 3, None, None), 160), ((200, 3, None, None), 512), ((8, 0, None, None), 8),
     ((40, 3, 64, None), None), ((40, 3, None, [1, 2, 4]), None), ((None, 0, None, None), None)],
)
def test_default_max_capture_size(args, expected) -> None:
    assert npu_compilation.default_max_capture_size(*args) == expected


def test_prune_capture_sizes_for_a5() -> None:
    assert npu_compilation.prune_capture_sizes(list(range(1, 11))) == [1, 4, 7, 10]
    assert npu_compilation.prune_capture_sizes([1, 2, 4]) == [1, 2, 4]


def test_sequence_parallel_alignment() -> None:
    assert npu_compilation.sp_capture_sizes([1, 2, 4, 6, 8, 12], 4) == [4, 8, 12]
    need = npu_compilation.needs_sp_alignment
    assert need(2, False, False, True, False, False)
    assert need(2, False, False, False, True, False) and need(2, False, False, False, False, True)
    assert not need(1, False, False, True, True, True)  # TP 1
    assert not need(2, True, False, True, False, False)  # no graphs
    assert not need(2, False, True, True, False, False)  # eager
    assert not need(2, False, False, False, False, False)  # no SP-like feature


@pytest.mark.parametrize(
    ("current", "sleep", "expected"),
    [(None, False, "expandable_segments:True"),
     ("max_split_size_mb:64", False, "max_split_size_mb:64"),
     ("garbage_collection_threshold:0.6", False, "garbage_collection_threshold:0.6"),
     ("foo:1", False, "foo:1,expandable_segments:True"),
     ("expandable_segments:False", False, "expandable_segments:False"),
     (None, True, None), ("foo:1", True, "foo:1")],
)
def test_npu_alloc_conf(current, sleep, expected) -> None:
    assert allocator_env.npu_alloc_conf(current, sleep) == expected


def test_drop_expandable_segments() -> None:
    drop = allocator_env.drop_expandable_segments
    assert drop("expandable_segments:True,max_split_size_mb:8") == "max_split_size_mb:8"
    assert drop("my_expandable_segments:x") == "my_expandable_segments:x"
    assert drop(None) is None


@pytest.mark.parametrize(
    ("size", "kw", "expected"),
    [(None, {}, 128), (16, {"prefix_caching": True}, 128), (16, {"chunked_prefill": True}, 128),
     (16, {}, 16), (256, {"xlite": True}, 128), (16, {"is_hybrid": True, "prefix_caching": True},
                                               16),
     (256, {"model_type": "deepseek_v4"}, 32), (64, {"model_type": "deepseek_v4"}, 64)],
)
def test_refreshed_block_size(size, kw, expected) -> None:
    args = {"model_type": "qwen3", "is_hybrid": False, "prefix_caching": False,
            "chunked_prefill": False, "xlite": False, **kw}
    assert derived_edits.refreshed_block_size(size, **args)[0] == expected


@pytest.mark.parametrize(
    ("tokens", "tp", "pcp", "sp", "expected"),
    [(1000, 4, 2, True, 1000), (1001, 4, 2, True, 1008), (1001, 2, 3, True, 1002),
     (1001, 4, 1, True, 1001),  # no prefill context parallel: unchanged
     (1001, 4, 3, False, 1001)],  # no sequence parallel: unchanged
)
def test_token_rounding(tokens, tp, pcp, sp, expected) -> None:
    assert derived_edits.rounded_batched_tokens(tokens, tp, pcp, sp) == expected


@pytest.mark.parametrize(
    ("kw", "expected"),
    [({"uses_sfa": True, "pcp": 2, "dcp": 1}, 128),
     ({"uses_sfa": True, "pcp": 2, "dcp": 2}, 1),  # replicated indexer keeps DCP's layout
     ({"uses_sfa": True, "pcp": 1, "dcp": 1}, 1),  # no context parallel
     ({"uses_sfa": False, "pcp": 2, "dcp": 1}, 1)],
)
def test_sfa_interleave_size(kw, expected) -> None:
    assert derived_edits.sfa_interleave_size(1, 128, **kw) == expected


def _cfg(**sched):
    base = {"recompute_scheduler_enable": False}
    section = types.SimpleNamespace(enabled=False)
    return types.SimpleNamespace(scheduler_config=types.SimpleNamespace(**{
        **base, "dyntra_lb_config": section, "profiling_chunk_config": section,
        "batch_job_sched_config": section, "short_request_first_config": section, **sched}))


ON = types.SimpleNamespace(enabled=True)


@pytest.mark.parametrize(
    ("sched", "role", "is_async", "key"),
    [({}, None, False, None),
     ({"recompute_scheduler_enable": True}, "kv_consumer", False, "recompute"),
     ({"recompute_scheduler_enable": True}, "kv_consumer", True, "async_recompute"),
     ({"recompute_scheduler_enable": True}, "kv_producer", False, None),
     ({"recompute_scheduler_enable": True, "dyntra_lb_config": ON}, "kv_consumer", True,
      "async_dyntra_lb_recompute"),
     ({"dyntra_lb_config": ON}, "kv_consumer", False, "dyntra_lb"),
     ({"profiling_chunk_config": ON}, None, True, "profiling_chunk"),
     ({"batch_job_sched_config": ON}, None, True, "async_batch_job"),
     ({"short_request_first_config": ON}, None, False, "short_request_first")],
)
def test_scheduler_key(sched, role, is_async, key) -> None:
    policies = selection.scheduler_policy(_cfg(**sched), role)
    assert selection.scheduler_key(policies, is_async) == key


def test_conflicting_policies_are_one_error() -> None:
    policies = selection.scheduler_policy(
        _cfg(profiling_chunk_config=ON, batch_job_sched_config=ON), None)
    with pytest.raises(ValueError, match="cannot be combined"):
        selection.scheduler_key(policies, False)


def test_worker_and_scheduler_decision() -> None:
    decide = selection.select_worker_and_scheduler
    runtime = {"worker": "rt.Worker"}
    kw = {"soc": "A2", "xlite": False, "kv_role": "kv_consumer", "async_scheduling": False}
    cfg = _cfg(recompute_scheduler_enable=True)
    got = decide(worker_setting="auto", ascend_config=cfg, runtime=runtime,
                 schedulers={"recompute": "rt.Recompute"}, **kw)
    assert (got.worker_cls, got.scheduler_cls) == ("rt.Worker", "rt.Recompute")
    mine = decide(worker_setting="my.Worker", ascend_config=_cfg(), runtime={}, schedulers={},
                  **kw)
    assert (mine.worker_cls, mine.scheduler_cls) == ("my.Worker", None)
    with pytest.raises(RuntimeError, match=r"'vllm_ascend\.runtime' with name 'worker'"):
        decide(worker_setting="auto", ascend_config=_cfg(), runtime={}, schedulers={}, **kw)
    with pytest.raises(RuntimeError, match="'recompute' scheduler"):
        decide(worker_setting="auto", ascend_config=cfg, runtime=runtime, schedulers={}, **kw)


def test_compilation_mode_rules_on_real_configs(make_vllm_config, caplog) -> None:
    import ascend_config
    from vllm.config import CompilationMode

    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    eager = make_vllm_config(enforce_eager=True)
    eager.compilation_config.splitting_ops = None
    eager.compilation_config.mode = CompilationMode.VLLM_COMPILE
    npu_compilation.update_compilation_mode(eager, resolved)
    assert eager.compilation_config.mode == CompilationMode.NONE
    assert eager.compilation_config.splitting_ops == []
    odd = make_vllm_config()
    odd.compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE
    notes = npu_compilation.update_compilation_mode(odd, resolved)
    assert odd.compilation_config.mode == CompilationMode.NONE and "not supported" in notes[0]


def test_compile_backend_rules_on_real_configs(make_vllm_config) -> None:
    import ascend_config
    from vllm.config import CompilationMode, CUDAGraphMode

    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    none = make_vllm_config()
    none.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    npu_compilation.setup_compile_backend(none, resolved, "A2", environ={})
    assert none.compilation_config.mode == CompilationMode.NONE
    assert none.compilation_config.backend == npu_compilation.COMPILER_PATH
    piece = make_vllm_config()
    piece.compilation_config.splitting_ops = None  # as on an NPU host (the CPU platform: [])
    piece.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE
    piece.compilation_config.cudagraph_capture_sizes = [1, 2, 4, 8, 16, 32]
    piece.compilation_config.max_cudagraph_capture_size = 32
    npu_compilation.setup_compile_backend(piece, resolved, "A5", environ={})
    assert "vllm::mla_forward" in piece.compilation_config.splitting_ops
    assert len(piece.compilation_config.cudagraph_capture_sizes) <= 4
    blocked = make_vllm_config()
    blocked.compilation_config.splitting_ops = None  # as on an NPU host (the CPU platform: [])
    blocked.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE
    blocked.compilation_config.cudagraph_capture_sizes = [1, 2, 4]
    blocked.compilation_config.max_cudagraph_capture_size = 4
    with pytest.raises(ValueError, match="ASCEND_LAUNCH_BLOCKING"):
        npu_compilation.setup_compile_backend(blocked, resolved, "A2",
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
    notes = npu_compilation.update_compilation_mode(cfg, resolved)
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode[expected]
    changed = graph_mode not in ("NONE", "PIECEWISE")
    assert any("encoder-decoder" in n for n in notes) == changed
    decoder_only = make_vllm_config()
    decoder_only.compilation_config.cudagraph_mode = CUDAGraphMode[graph_mode]
    npu_compilation.update_compilation_mode(decoder_only, resolved)
    assert decoder_only.compilation_config.cudagraph_mode == CUDAGraphMode[graph_mode]


def _kv_config(make_vllm_config, engine_id="prefill-0"):
    kv = {"kv_connector": "ExampleConnector", "kv_role": "kv_producer", "engine_id": engine_id}
    return make_vllm_config(enforce_eager=True, kv_transfer_config=kv)


def test_engine_id_gets_one_uuid_suffix(make_vllm_config) -> None:
    import copy
    import re

    cfg = _kv_config(make_vllm_config)
    new_id = kv_engine_id.make_engine_id_unique(cfg)
    assert re.fullmatch(r"prefill-0-[0-9a-f]{32}", new_id)
    assert cfg.kv_transfer_config.engine_id == new_id
    assert kv_engine_id.make_engine_id_unique(cfg) is None  # never twice for the same config
    assert cfg.kv_transfer_config.engine_id == new_id
    copied = copy.deepcopy(cfg)
    assert kv_engine_id.make_engine_id_unique(copied) is None
    assert copied.kv_transfer_config.engine_id == new_id
    other = _kv_config(make_vllm_config)  # another engine from the same JSON: its own id
    other_id = kv_engine_id.make_engine_id_unique(other)
    assert other_id.startswith("prefill-0-") and other_id != new_id
    cfg.kv_transfer_config.engine_id = "decode-1"  # a new id set later is suffixed again
    assert kv_engine_id.make_engine_id_unique(cfg).startswith("decode-1-")


def test_engine_id_untouched_without_kv_transfer(make_vllm_config) -> None:
    cfg = make_vllm_config(enforce_eager=True)
    assert cfg.kv_transfer_config is None
    assert kv_engine_id.make_engine_id_unique(cfg) is None
    assert kv_engine_id.suffixed_engine_id("e", "ab" * 16) == "e-" + "ab" * 16


def test_eplb_communicator_becomes_hccl_device_group() -> None:
    eplb = types.SimpleNamespace(communicator=None)
    cfg = types.SimpleNamespace(parallel_config=types.SimpleNamespace(enable_eplb=True,
                                                                      eplb_config=eplb))
    assert "'torch_nccl'" in gpu_fixes.use_hccl_eplb_communicator(cfg)
    assert eplb.communicator == "torch_nccl"
    assert gpu_fixes.use_hccl_eplb_communicator(cfg) is None
    eplb.communicator = "torch_gloo"
    cfg.parallel_config.enable_eplb = False  # vLLM's EPLB off: left alone
    assert gpu_fixes.use_hccl_eplb_communicator(cfg) is None
    assert eplb.communicator == "torch_gloo"


# A value vLLM accepts but Ascend cannot use, for every GPU-only setting of vLLM 0.32.
GPU_VALUES = {
    "disable_cascade_attn": False, "enable_layerwise_nvtx_tracing": True, "quantization": "fp8",
    "enable_permute_local_kv": True, "use_trtllm_attention": True,
    "disable_flashinfer_q_quantization": True, "flash_attn_version": 3, "backend": "FLASH_ATTN",
    "flash_attn_max_num_splits_for_cuda_graph": 16, "ray_workers_use_nsight": True,
    "numa_bind": True, "numa_bind_nodes": [0], "numa_bind_cpus": "0-3", "enable_dbo": True,
    "ubatch_size": 2, "use_inductor_graph_partition": True,
}


def test_every_gpu_only_setting_is_reset_on_a_real_config(make_vllm_config, tiny_qwen3) -> None:
    """Reference 4.4 _fix_incompatible_config: each present setting reset, one warning each;
    settings of other vLLM releases (absent here) are skipped."""
    cfg = make_vllm_config(enforce_eager=True, speculative_config={
        "method": "draft_model", "model": str(tiny_qwen3), "num_speculative_tokens": 2},
        kv_transfer_config={"kv_connector": "ExampleConnector", "kv_role": "kv_both"})
    present = []
    for setting in gpu_fixes.GPU_ONLY_SETTINGS:
        section = gpu_fixes._section(cfg, setting.section)
        if section is None or not hasattr(section, setting.field):
            continue
        present.append((section, setting))
        setattr(section, setting.field, GPU_VALUES[setting.field])
    assert len(present) == len(GPU_VALUES)
    warnings = gpu_fixes.fix_gpu_only_settings(cfg)
    assert len(warnings) == len(present)
    for (section, setting), warning in zip(present, warnings, strict=True):
        assert getattr(section, setting.field) == setting.value
        assert warning.startswith(f"{setting.section}.{setting.field}=")
    assert gpu_fixes.fix_gpu_only_settings(cfg) == []


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
    npu_compilation.update_compilation_mode(cfg, resolved)
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
    npu_compilation.setup_compile_backend(full, resolved, "A2", environ={})
    assert full.compilation_config.splitting_ops == []  # full graphs: no piecewise split
    assert full.compilation_config.cudagraph_num_of_warmups == 1
    assert full.compilation_config.mode == CompilationMode.VLLM_COMPILE
    piece = graph_config(CUDAGraphMode.FULL_AND_PIECEWISE)
    piece.compilation_config.mode = CompilationMode.NONE
    with pytest.raises(ValueError, match="needs compilation mode VLLM_COMPILE"):
        npu_compilation.setup_compile_backend(piece, resolved, "A2", environ={})


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
    notes = npu_compilation.setup_compile_backend(kept, resolved, "A2", environ={})
    assert kept.compilation_config.cudagraph_capture_sizes == [2, 4, 6]
    assert kept.compilation_config.max_cudagraph_capture_size == 6
    assert any("sequence parallelism" in n for n in notes)
    with pytest.raises(ValueError, match="multiples of TP"):
        npu_compilation.setup_compile_backend(graph_config([1, 3]), resolved, "A2", environ={})


def test_index_topk_models_cache_in_the_model_dtype(make_vllm_config) -> None:
    import ascend_config
    from vllm_ascend.base.facts import extract_facts

    cfg = make_vllm_config(enforce_eager=True)
    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    assert derived_edits.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2")) == []
    cfg.model_config.hf_text_config.index_topk = 64  # a DeepSeek sparse-attention trait
    notes = derived_edits.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.cache_config.cache_dtype == "float32"
    assert notes == ["cache_dtype=float32 (model has index_topk)"]
    # SFA (index_topk, no compress_ratios) under prefill context parallel: whole blocks.
    cfg.parallel_config.prefill_context_parallel_size = 2
    cfg.parallel_config.cp_kv_cache_interleave_size = 1
    notes = derived_edits.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.parallel_config.cp_kv_cache_interleave_size == cfg.cache_config.block_size
    assert "cp_kv_cache_interleave_size=" in notes[-1]


def test_derived_edits_on_a_real_config(make_vllm_config) -> None:
    import ascend_config
    from vllm_ascend.base.facts import extract_facts

    cfg = make_vllm_config(block_size=32, enable_prefix_caching=True)
    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    notes = derived_edits.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.cache_config.block_size == 128 and "block_size=128" in notes[0]


def test_npu_platform_attributes_and_capabilities() -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    p = NPUPlatform()
    assert (p.device_name, p.device_type, p.dispatch_key) == ("npu", "npu", "PrivateUse1")
    assert p.device_control_env_var == "ASCEND_RT_VISIBLE_DEVICES"
    assert p.ray_device_key == "NPU" and p.simple_compile_backend == "eager"
    assert p.ray_noset_device_env_vars == ["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]
    assert p.supported_quantization == ["ascend", "compressed-tensors", "fp8",
                                        "deepseek_v4_fp8", "modelopt_mxfp8", "mxfp8"]
    assert p.pass_key == "graph_fusion_manager" and p.is_out_of_tree()
    # What the NPU runtime of vllm_ascend.npu_runtime provides: no sleep-mode pool, no
    # pluggable allocator, one full-attention KV group (dense models).
    assert not p.is_sleep_mode_available() and not p.is_cumem_allocator_available()
    assert not p.support_hybrid_kv_cache()
    assert all(f() for f in (p.is_pin_memory_available, p.opaque_attention_op,
                             p.support_static_graph_mode, p.use_custom_op_collectives))
    import torch

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        p.check_if_supports_dtype(dtype)
    with pytest.raises(ValueError, match=r"torch\.float64 is not supported.*allowed: "
                                         r"torch\.float16, torch\.bfloat16, torch\.float32"):
        p.check_if_supports_dtype(torch.float64)
    assert p.get_device_capability() is None
    assert p.get_compile_backend() == "vllm_ascend.compilation.compiler.AscendCompiler"
    assert p.get_static_graph_wrapper_cls() == (
        "vllm_ascend.compilation.graph_wrapper.AscendGraphWrapper")
    with pytest.raises(NotImplementedError):
        p.get_device_total_memory()
    assert p.set_additional_forward_context(vllm_config=types.SimpleNamespace()) == {}


def test_runtime_pieces_come_from_entry_points(monkeypatch, fake_torch_npu) -> None:
    from pathlib import Path

    from vllm_ascend.platform.npu import NPUPlatform

    with pytest.raises(RuntimeError, match=r"'vllm_ascend\.runtime' name 'punica'"):
        NPUPlatform.get_punica_wrapper()
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    assert NPUPlatform.get_punica_wrapper() == "ascend_test_ext.TestWorker"
    assert NPUPlatform.get_device_communicator_cls() == "ascend_test_ext.TestWorker"
    assert NPUPlatform.get_attn_backend_cls(None, None) == "ascend_test_ext.TestWorker"
    import ascend_test_ext

    NPUPlatform.register_custom_kv_cache_specs("cfg")
    assert ascend_test_ext.REGISTERED_SPECS[-1] == "cfg"


def test_pre_register_adds_ascend_quantization_once(fake_torch_npu) -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    parser = argparse.ArgumentParser()
    parser.add_argument("--quantization", choices=["fp8", "awq"])
    NPUPlatform.pre_register_and_update(parser)
    NPUPlatform.pre_register_and_update(parser)
    NPUPlatform.pre_register_and_update(None)
    action = next(a for a in parser._actions if "--quantization" in a.option_strings)
    assert list(action.choices) == ["fp8", "awq", "ascend"]


def test_missing_npu_runtime_is_reported_at_configuration_time(py_runner, make_env,
                                                              tiny_qwen3, tmp_path) -> None:
    code = f"""
        import json
        from vllm.platforms import current_platform
        from vllm.engine.arg_utils import EngineArgs
        try:
            EngineArgs(model={str(tiny_qwen3)!r}, load_format="dummy").create_engine_config()
            err = None
        except Exception as exc:
            err = type(exc).__name__ + ": " + str(exc)
        print("RESULT " + json.dumps({{"platform": type(current_platform).__name__,
                                       "err": err}}))
    """
    out = py_runner(code, make_env(tmp_path, VLLM_ASCEND_DEVICE="npu"), timeout=240)
    assert out["platform"] == "NPUPlatform"
    assert out["err"].startswith("NpuRuntimeMissingError") and "torch_npu is missing" in (
        out["err"])


def test_whole_npu_pipeline_on_a_real_config(make_vllm_config, fake_torch_npu,
                                             monkeypatch) -> None:
    """The NPU pipeline end to end with the fake torch_npu and the test runtime package."""
    from pathlib import Path

    from vllm.config import CompilationMode, CUDAGraphMode
    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    cfg = make_vllm_config(enforce_eager=True, block_size=64, enable_prefix_caching=True)
    cfg.attention_config.flash_attn_version = 3
    cfg.parallel_config.worker_cls = "auto"  # as on an NPU host (the CPU platform set it)
    import os

    affinity = os.sched_getaffinity(0)
    resolved = run_npu_pipeline(cfg, "A2")
    assert os.sched_getaffinity(0) == affinity
    assert resolved.ascend_compilation_config.fuse_qknorm_rope is True
    assert cfg.parallel_config.worker_cls == "ascend_test_ext.TestWorker"
    assert cfg.compilation_config.mode == CompilationMode.NONE
    assert cfg.compilation_config.cudagraph_mode == CUDAGraphMode.NONE
    assert cfg.compilation_config.backend == npu_compilation.COMPILER_PATH
    assert cfg.attention_config.flash_attn_version is None
    assert cfg.cache_config.block_size == 128
    assert os.environ["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert os.environ["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "3000"
    from vllm_ascend.process.process_setup import current_process_setup

    # The engine side knows no worker rank: it binds nothing (workers bind themselves).
    assert current_process_setup().cpu_binding == []


def test_npu_pipeline_run_twice_suffixes_the_engine_id_once(make_vllm_config, fake_torch_npu,
                                                             monkeypatch) -> None:
    import re
    from pathlib import Path

    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    cfg = _kv_config(make_vllm_config, engine_id="p0")
    cfg.parallel_config.worker_cls = "auto"
    cfg.compilation_config.custom_ops = ["none"]
    run_npu_pipeline(cfg, "A2")
    assert cfg.compilation_config.custom_ops == ["all"]  # every Ascend custom op (not 310P)
    first = cfg.kv_transfer_config.engine_id
    assert re.fullmatch(r"p0-[0-9a-f]{32}", first)
    cfg.parallel_config.worker_cls = "auto"
    run_npu_pipeline(cfg, "A2")
    assert cfg.kv_transfer_config.engine_id == first


def test_pipeline_skips_other_devices_and_missing_model_config(make_vllm_config,
                                                               caplog) -> None:
    """Reference 4.3 step 2: a non-NPU device config is left alone; no model config -> one
    warning, and only vLLM's GPU-only fusion flags switched off."""
    import logging

    from vllm_ascend.config_pipeline.steps import run_cpu_pipeline, run_npu_pipeline
    from vllm_ascend.platform.npu import NPUPlatform

    cfg = make_vllm_config(enforce_eager=True)
    assert cfg.device_config.device_type == "cpu"
    backend, workers = cfg.compilation_config.backend, cfg.parallel_config.worker_cls
    NPUPlatform.check_and_update_config(cfg)  # would need torch_npu if it ran
    assert (cfg.compilation_config.backend, cfg.parallel_config.worker_cls) == (backend, workers)
    def no_model() -> types.SimpleNamespace:
        passes = types.SimpleNamespace(fuse_norm_quant=True, fuse_act_quant=False)
        return types.SimpleNamespace(
            model_config=None, compilation_config=types.SimpleNamespace(pass_config=passes))

    npu_side = no_model()
    with caplog.at_level(logging.WARNING):
        assert run_npu_pipeline(npu_side, "A2") is None
    assert "Model config is missing" in caplog.text
    cpu_side = no_model()
    defaults = []
    assert run_cpu_pipeline(cpu_side, defaults.append) is None
    assert defaults == [cpu_side]  # the CPU platform's own defaults still apply
    for cfg in (npu_side, cpu_side):
        assert vars(cfg.compilation_config.pass_config) == {
            "fuse_norm_quant": False, "fuse_act_quant": False}


def test_platform_defaults_and_block_size_hooks_on_real_configs(make_vllm_config) -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    cfg = make_vllm_config(enforce_eager=True, max_num_seqs=40)
    cc = cfg.compilation_config
    cc.max_cudagraph_capture_size, cc.cudagraph_capture_sizes = None, None
    NPUPlatform.apply_config_platform_defaults(cfg)
    assert cc.max_cudagraph_capture_size == 40
    cc.max_cudagraph_capture_size = 8  # an explicit user value is kept
    NPUPlatform.apply_config_platform_defaults(cfg)
    assert cc.max_cudagraph_capture_size == 8
    before = cfg.cache_config.block_size
    NPUPlatform.update_block_size_for_backend(cfg)  # dense model: unchanged
    assert cfg.cache_config.block_size == before


@pytest.fixture
def post_grad_pass_manager():
    """vLLM's PostGradPassManager, imported before the fake torch_npu is installed (the import
    reaches transformers, which probes torch_npu for attributes the fake does not model)."""
    from vllm.compilation.passes.pass_manager import PostGradPassManager

    return PostGradPassManager


def test_npu_pipeline_leaves_no_vllm_gpu_fusion_on_with_or_without_a_model(
    post_grad_pass_manager, make_vllm_config, fake_torch_npu, monkeypatch
) -> None:
    """vLLM switches fuse_norm_quant on when rms_norm's first IR provider is not native (the
    Ascend priority); its pass class exists only on CUDA/XPU, so vLLM's PostGradPassManager
    (AscendPassManager's base) would fail with a NameError."""
    from pathlib import Path

    from vllm.config import VllmConfig
    from vllm.config.vllm import enable_norm_fusion
    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    modelless = VllmConfig()
    with_model = make_vllm_config(enforce_eager=True)
    with_model.parallel_config.worker_cls = "auto"  # as on an NPU host
    for cfg in (modelless, with_model):
        pc = cfg.compilation_config.pass_config
        # What vLLM's optimization-level defaults set on an NPU host (this session's host-CPU
        # platform has already turned it off).
        pc.fuse_norm_quant = enable_norm_fusion(cfg)
        assert pc.fuse_norm_quant is True
        run_npu_pipeline(cfg, "A2")
        assert not any(getattr(pc, f, False) for f in gpu_fixes.VLLM_GPU_FUSION_FLAGS)
        post_grad_pass_manager().configure(cfg)  # NameError when one is left on


DUMP = {"task": "statistics", "level": "L1", "dump_path": "/tmp/msprobe", "step": [0, 1],
        "note": "données"}


TARGET = Path(".vllm_ascend") / "msprobe" / "msprobe_dump_config.json"


def test_config_build_writes_the_dump_file(make_vllm_config: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_vllm_config(additional_config={"dump_config": DUMP})  # runs the platform pipeline
    written = tmp_path / TARGET
    assert json.loads(written.read_text(encoding="utf-8")) == DUMP
    assert "données" in written.read_text(encoding="utf-8")  # non-ASCII kept
    assert list(written.parent.iterdir()) == [written]  # no temporary file left behind


def test_no_dump_config_writes_nothing_and_a_path_is_used_as_given(
    make_vllm_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    monkeypatch.chdir(tmp_path)
    make_vllm_config()
    own = tmp_path / "mine.json"
    make_vllm_config(additional_config={"dump_config_path": str(own)})
    assert not (tmp_path / ".vllm_ascend").exists()
    import ascend_config

    resolved = ascend_config.resolve({"dump_config_path": str(own)},
                                     facts=ascend_config.DeploymentFacts())
    assert write_dump_config(resolved, str(tmp_path)) == own


def test_unwritable_target_is_one_clear_error(tmp_path: Path) -> None:
    import ascend_config
    from vllm_ascend.config_pipeline.steps import write_dump_config

    (tmp_path / ".vllm_ascend").write_text("a file where the directory should be")
    resolved = ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())
    with pytest.raises(RuntimeError, match=r"dump_config: cannot write .*msprobe_dump_config"):
        write_dump_config(resolved, str(tmp_path))


OTHER_UID = 12345


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a path to another uid needs "
                                                          "root (chown)")


@pytest.fixture
def steps_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The step's warnings, also when the vllm_ascend logger no longer propagates to root."""
    logger = logging.getLogger("vllm_ascend.config_pipeline.steps")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def _resolved() -> Any:
    import ascend_config

    return ascend_config.resolve({"dump_config": DUMP}, facts=ascend_config.DeploymentFacts())


def _refused(tmp_path: Path, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) is None
    records = {id(r): r for r in caplog.records}.values()  # root may have seen it too
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"dump_config: not writing {tmp_path / TARGET}: ")
    assert reason in warnings[0]


def test_the_dump_directory_is_made_private(tmp_path: Path) -> None:
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET
    for folder in (tmp_path / ".vllm_ascend", tmp_path / TARGET.parent):
        assert folder.stat().st_mode & 0o777 == 0o700
    assert json.loads((tmp_path / TARGET).read_text(encoding="utf-8")) == DUMP
    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET  # again: fine


@needs_root
def test_a_dump_directory_another_user_made_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    planted = tmp_path / TARGET.parent
    planted.mkdir(parents=True, mode=0o755)
    (planted / TARGET.name).write_text('{"task": "theirs"}')
    os.chown(planted, OTHER_UID, OTHER_UID)
    _refused(tmp_path, steps_warnings, f"owned by uid {OTHER_UID}")
    assert (planted / TARGET.name).read_text() == '{"task": "theirs"}'
    assert sorted(p.name for p in planted.iterdir()) == [TARGET.name]  # no temporary file


def test_a_dump_directory_others_can_write_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    planted = tmp_path / TARGET.parent
    planted.mkdir(parents=True)
    os.chmod(planted, 0o777)
    _refused(tmp_path, steps_warnings, "writable by group or others (mode 777)")
    assert list(planted.iterdir()) == []


@needs_root
def test_a_dump_directory_reached_through_another_users_symlink_is_refused(
    tmp_path: Path, steps_warnings: pytest.LogCaptureFixture
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)  # a directory of ours, but the link's owner chose it
    (tmp_path / ".vllm_ascend").symlink_to(theirs)
    os.lchown(tmp_path / ".vllm_ascend", OTHER_UID, OTHER_UID)
    _refused(tmp_path, steps_warnings, f".vllm_ascend is a symlink owned by uid {OTHER_UID}")
    assert list(theirs.iterdir()) == []  # not even the msprobe folder was made
    os.lchown(tmp_path / ".vllm_ascend", 0, 0)  # the same link owned by this user: followed
    from vllm_ascend.config_pipeline.steps import write_dump_config

    assert write_dump_config(_resolved(), str(tmp_path)) == tmp_path / TARGET
    assert json.loads((theirs / "msprobe" / TARGET.name).read_text(encoding="utf-8")) == DUMP

"""The vLLM settings the config pipeline corrects (``config_pipeline.vllm_settings``): the
kv-transfer engine id, vLLM's EPLB communicator, the GPU-only settings (every one of this vLLM
release on a real config) and the execute-model timeout."""

from __future__ import annotations

import logging
import types

from vllm_ascend.config_pipeline import vllm_settings


def _kv_config(make_vllm_config, engine_id="prefill-0"):
    kv = {"kv_connector": "ExampleConnector", "kv_role": "kv_producer", "engine_id": engine_id}
    return make_vllm_config(enforce_eager=True, kv_transfer_config=kv)


def test_engine_id_gets_one_uuid_suffix(make_vllm_config) -> None:
    import copy
    import re

    cfg = _kv_config(make_vllm_config)
    new_id = vllm_settings.make_engine_id_unique(cfg)
    assert re.fullmatch(r"prefill-0-[0-9a-f]{32}", new_id)
    assert cfg.kv_transfer_config.engine_id == new_id
    assert vllm_settings.make_engine_id_unique(cfg) is None  # never twice for the same config
    assert cfg.kv_transfer_config.engine_id == new_id
    copied = copy.deepcopy(cfg)
    assert vllm_settings.make_engine_id_unique(copied) is None
    assert copied.kv_transfer_config.engine_id == new_id
    other = _kv_config(make_vllm_config)  # another engine from the same JSON: its own id
    other_id = vllm_settings.make_engine_id_unique(other)
    assert other_id.startswith("prefill-0-") and other_id != new_id
    cfg.kv_transfer_config.engine_id = "decode-1"  # a new id set later is suffixed again
    assert vllm_settings.make_engine_id_unique(cfg).startswith("decode-1-")


def test_engine_id_untouched_without_kv_transfer(make_vllm_config) -> None:
    cfg = make_vllm_config(enforce_eager=True)
    assert cfg.kv_transfer_config is None
    assert vllm_settings.make_engine_id_unique(cfg) is None
    assert vllm_settings.suffixed_engine_id("e", "ab" * 16) == "e-" + "ab" * 16


def test_eplb_communicator_becomes_hccl_device_group() -> None:
    eplb = types.SimpleNamespace(communicator=None)
    cfg = types.SimpleNamespace(parallel_config=types.SimpleNamespace(enable_eplb=True,
                                                                      eplb_config=eplb))
    assert "'torch_nccl'" in vllm_settings.use_hccl_eplb_communicator(cfg)
    assert eplb.communicator == "torch_nccl"
    assert vllm_settings.use_hccl_eplb_communicator(cfg) is None
    eplb.communicator = "torch_gloo"
    cfg.parallel_config.enable_eplb = False  # vLLM's EPLB off: left alone
    assert vllm_settings.use_hccl_eplb_communicator(cfg) is None
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
    for setting in vllm_settings.GPU_ONLY_SETTINGS:
        section = vllm_settings._section(cfg, setting.section)
        if section is None or not hasattr(section, setting.field):
            continue
        present.append((section, setting))
        setattr(section, setting.field, GPU_VALUES[setting.field])
    assert len(present) == len(GPU_VALUES)
    warnings = vllm_settings.fix_gpu_only_settings(cfg)
    assert len(warnings) == len(present)
    for (section, setting), warning in zip(present, warnings, strict=True):
        assert getattr(section, setting.field) == setting.value
        assert warning.startswith(f"{setting.section}.{setting.field}=")
    assert vllm_settings.fix_gpu_only_settings(cfg) == []


def test_gpu_only_settings_are_reset_with_one_warning_each(make_vllm_config, caplog) -> None:
    cfg = make_vllm_config(enforce_eager=True)
    cfg.model_config.disable_cascade_attn = False
    cfg.parallel_config.ray_workers_use_nsight = True
    cfg.parallel_config.numa_bind_nodes = [0]
    cfg.attention_config.flash_attn_version = 3
    cfg.attention_config.use_trtllm_attention = True
    cfg.kv_transfer_config = None
    with caplog.at_level(logging.WARNING):
        warnings = vllm_settings.fix_gpu_only_settings(cfg)
    assert len(warnings) == 5
    assert cfg.model_config.disable_cascade_attn is True
    assert cfg.parallel_config.ray_workers_use_nsight is False
    assert cfg.parallel_config.numa_bind_nodes is None
    assert cfg.attention_config.flash_attn_version is None
    assert cfg.attention_config.use_trtllm_attention is False
    assert vllm_settings.fix_gpu_only_settings(cfg) == []  # idempotent


def test_execute_model_timeout_rule() -> None:
    env = {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "300"}
    assert vllm_settings.fix_execute_model_timeout(env) is not None
    assert env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "3000"
    enough = {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1836"}
    assert vllm_settings.fix_execute_model_timeout(enough) is None

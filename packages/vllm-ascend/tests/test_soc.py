"""The SoC comes from the device: torch_npu's id (the schema-bound seam, ``torch_npu_double.seam``),
read once per process through ``ProcessSetup``, and every SoC branch reached through the
platform's entry points (``check_and_update_config``, the worker hook, the forward-context
hook, the attention selector), never by handing a SoC in."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from torch_npu_double.seam import install, load_record
from vllm_ascend.base import soc as soc_table
from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV, published_inputs
from vllm_ascend.platform.npu import NPUPlatform
from vllm_ascend.process.process_setup import current_process_setup, reset_process_setup

EXT_DIR = Path(__file__).parent / "ext_pkg"
# The SoC families of torch_npu's SocVersion numbers, as its enum's comments and the upstream
# plugin's ranges give them, 256 (Ascend910_9363) included.
FAMILY_OF = {**dict.fromkeys(range(220, 226), "A2"), **dict.fromkeys(range(250, 257), "A3"),
             **dict.fromkeys(range(200, 206), "310P"), 260: "A5"}


# ---------------------------------------------------------------------------- the SoC table

def test_the_table_is_the_wheels_socversion_enum() -> None:
    enum = {name: soc_id for name, soc_id in load_record()["soc_versions"].items()
            if soc_id >= 0}  # UnsupportedSocVersion = -1 is no part
    assert {name: soc_id for name, soc_id, _ in soc_table.SOC_VERSIONS} == enum
    families = {soc_id: family for _, soc_id, family in soc_table.SOC_VERSIONS if family}
    assert families == FAMILY_OF


@pytest.mark.parametrize("soc_id", sorted(FAMILY_OF))
def test_every_supported_id_maps_to_its_family(soc_id: int) -> None:
    found = soc_table.soc_for_id(soc_id)
    assert (found.soc, found.warnings) == (FAMILY_OF[soc_id], ())


@pytest.mark.parametrize(("soc_id", "part"), [(102, "Ascend910A"), (104, "Ascend910B"),
                                               (240, "Ascend310B1"), (243, "Ascend310B4")])
def test_parts_the_plugin_does_not_run_on_fail_clearly(soc_id: int, part: str) -> None:
    with pytest.raises(soc_table.UnsupportedSocError,
                       match=rf"an {part} \(SoC id {soc_id}\).*A2 220-225, A3 250-256, A5 260, "
                             r"310P 200-205"):
        soc_table.soc_for_id(soc_id)


@pytest.mark.parametrize(("soc_id", "family"), [(226, "A2"), (229, "A2"), (257, "A3"),
                                                 (261, "A5"), (206, "310P")])
def test_an_unknown_id_in_a_family_block_runs_as_that_family_with_a_warning(
        soc_id: int, family: str) -> None:
    found = soc_table.soc_for_id(soc_id)
    assert (found.soc, found.name) == (family, None)
    [warning] = found.warnings
    assert f"unknown Ascend SoC id {soc_id}" in warning and f"could be {family}" in warning


@pytest.mark.parametrize("soc_id", [-1, 0, 199, 210, 219, 230, 249, 270, 300])
def test_an_unknown_id_outside_every_family_block_is_an_error(soc_id: int) -> None:
    with pytest.raises(soc_table.UnsupportedSocError,
                       match=rf"unknown Ascend SoC id {soc_id}: .*supported SoC ids"):
        soc_table.soc_for_id(soc_id)


def test_a_runtime_that_cannot_answer_is_named() -> None:
    def broken() -> int:
        raise RuntimeError("aclrtGetSocName failed")

    with pytest.raises(soc_table.UnsupportedSocError, match=r"get_soc_version\(\) failed"):
        soc_table.detect_soc(broken)
    with pytest.raises(soc_table.UnsupportedSocError, match="not an int SoC id"):
        soc_table.detect_soc(lambda: "Ascend910B3")


# -------------------------------------------------------------- detection through the device

@pytest.mark.parametrize("soc_id", [223, 256, 260, 202])
def test_the_platform_soc_is_read_from_the_device_once_per_process(
        monkeypatch: pytest.MonkeyPatch, soc_id: int) -> None:
    fake = install(monkeypatch, soc_id=soc_id)
    try:
        platform = NPUPlatform()
        assert platform.soc == FAMILY_OF[soc_id] and NPUPlatform.platform_soc() == platform.soc
        assert len(fake.npu.called("get_soc_version")) == 1  # cached on the process owner
        assert current_process_setup().soc_detection.soc_id == soc_id
        reset_process_setup()  # a fresh process reads it again
        assert platform.soc == FAMILY_OF[soc_id]
        assert len(fake.npu.called("get_soc_version")) == 2
    finally:
        fake.close()


def test_an_unknown_id_is_one_warning_not_a_silent_a2(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    fake = install(monkeypatch, soc_id=257)
    try:
        with caplog.at_level(logging.WARNING):
            assert NPUPlatform().soc == "A3"
            assert NPUPlatform().soc == "A3"
        warnings = [r for r in caplog.records if "unknown Ascend SoC id 257" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        fake.close()


def test_an_unsupported_part_stops_the_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, soc_id=242)
    try:
        with pytest.raises(soc_table.UnsupportedSocError, match="Ascend310B3"):
            NPUPlatform.platform_soc()
        assert current_process_setup().soc_detection is None
    finally:
        fake.close()


# --------------------------------------------------- check_and_update_config on each SoC

@pytest.fixture
def npu_config(make_vllm_config: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real VllmConfig handed to ``NPUPlatform.check_and_update_config`` with the fake
    device reporting ``soc_id`` (as vLLM does on an NPU host; worker_cls "auto")."""
    monkeypatch.syspath_prepend(str(EXT_DIR))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 WORKER_INPUTS_ENV, "VLLM_WORKER_MULTIPROC_METHOD"):
        monkeypatch.delenv(name, raising=False)
    fakes = []

    def build(soc_id: int, *, graph_sizes: list[int] | None = None,
              multiproc: str | None = None, **kwargs: Any) -> Any:
        from vllm.config import CompilationMode, CUDAGraphMode

        reset_process_setup()
        fakes.append(install(monkeypatch, soc_id=soc_id))
        cfg = make_vllm_config(enforce_eager=graph_sizes is None, **kwargs)
        cfg.parallel_config.worker_cls = "auto"
        cfg.device_config.device_type = "npu"
        cfg.compilation_config.custom_ops = ["none"]  # the host-CPU platform's turned all on
        if graph_sizes is not None:
            cc = cfg.compilation_config
            cc.splitting_ops = None  # as on an NPU host (the CPU platform: [])
            cc.mode = CompilationMode.VLLM_COMPILE
            cc.cudagraph_mode = CUDAGraphMode.PIECEWISE
            cc.cudagraph_capture_sizes = graph_sizes
            cc.max_cudagraph_capture_size = graph_sizes[-1]
        if multiproc is not None:  # after vLLM's config creation, which may set its own
            monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", multiproc)
        NPUPlatform.check_and_update_config(cfg)
        return cfg

    yield build
    for fake in fakes:
        fake.close()


@pytest.mark.parametrize(("soc_id", "worker"), [
    (223, "ascend_test_ext.TestWorker"), (256, "ascend_test_ext.TestWorker"),
    (260, "ascend_test_ext.TestWorker"), (202, "ascend_test_ext.TestWorker310P")])
def test_check_and_update_config_runs_as_the_detected_soc(npu_config: Any, soc_id: int,
                                                          worker: str) -> None:
    import os

    cfg = npu_config(soc_id)
    assert cfg.parallel_config.worker_cls == worker
    published = published_inputs()
    assert published is not None
    assert published["soc"] == published["facts"]["soc"] == FAMILY_OF[soc_id]
    # 310P keeps vLLM's custom-op choice; every other SoC turns all Ascend custom ops on.
    assert cfg.compilation_config.custom_ops == (
        ["none"] if FAMILY_OF[soc_id] == "310P" else ["all"])
    # Reading the SoC initialised the NPU runtime here: workers must be spawned.
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_a5_prunes_the_capture_sizes_and_a2_keeps_them(npu_config: Any) -> None:
    sizes = [1, 2, 4, 8, 16, 24, 32, 48, 64]
    a2 = npu_config(223, graph_sizes=list(sizes))
    assert a2.compilation_config.cudagraph_capture_sizes == sizes
    a5 = npu_config(260, graph_sizes=list(sizes))
    kept = a5.compilation_config.cudagraph_capture_sizes
    assert len(kept) <= 4 and kept[0] == 1 and kept[-1] == 64 and set(kept) <= set(sizes)


def test_the_user_s_multiprocessing_method_is_kept(npu_config: Any) -> None:
    import os

    npu_config(223, multiproc="fork")
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"


def test_a_missing_runtime_is_reported_before_any_soc_read(make_vllm_config: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from vllm_ascend.base.npu_device import NpuRuntimeMissingError

    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    cfg = make_vllm_config(enforce_eager=True)
    cfg.device_config.device_type = "npu"
    with pytest.raises(NpuRuntimeMissingError, match="torch_npu is missing"):
        NPUPlatform.check_and_update_config(cfg)


# ------------------------------------------------------------------ the worker-side hooks

@pytest.mark.parametrize(("soc_id", "variant"), [(223, "standard"), (202, "310p")])
def test_the_attention_selector_asks_the_device(monkeypatch: pytest.MonkeyPatch, soc_id: int,
                                                variant: str) -> None:
    import torch
    from vllm.v1.attention.selector import AttentionSelectorConfig

    monkeypatch.delenv(WORKER_INPUTS_ENV, raising=False)
    monkeypatch.syspath_prepend(str(EXT_DIR))
    fake = install(monkeypatch, soc_id=soc_id)
    try:
        selector = AttentionSelectorConfig(head_size=64, dtype=torch.bfloat16,
                                           kv_cache_dtype=None, block_size=128, use_mla=True)
        if variant == "310p":  # the test extension maps no 310P backend
            with pytest.raises(RuntimeError, match="'310p' attention backend is needed"):
                NPUPlatform.get_attn_backend_cls(None, selector)
        else:
            assert NPUPlatform.get_attn_backend_cls(None, selector) == (
                "ascend_test_ext.TestMLABackend")
    finally:
        fake.close()


@pytest.fixture
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen3MoeConfig

    path = tmp_path_factory.mktemp("moe") / "qwen3moe"
    Qwen3MoeConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=8, num_experts_per_tok=2, max_position_embeddings=256,
        architectures=["Qwen3MoeForCausalLM"],
    ).save_pretrained(path)
    return path


@pytest.mark.parametrize(("soc_id", "method"), [(223, "ALLGATHER"), (256, "MC2"), (260, "MC2"),
                                                 (202, "ALLGATHER")])
def test_the_moe_method_follows_the_device(make_vllm_config: Any, tiny_moe: Path,
                                           monkeypatch: pytest.MonkeyPatch, soc_id: int,
                                           method: str) -> None:
    """EP over 2 ranks, a decode-sized forward: A3 and A5 use MC2; A2 needs EP >= 16 for it
    (ALLGATHER); 310P always gathers (reference table 5.4)."""
    from vllm_ascend.distributed.moe_comm import MoECommType
    from vllm_ascend.engine.registry import build_engine
    from vllm_ascend.process.process_setup import reset_process_setup

    cfg = make_vllm_config(model=str(tiny_moe), enforce_eager=True, skip_tokenizer_init=True,
                           tensor_parallel_size=2, enable_expert_parallel=True)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")  # the NPU hook serves runner v2
    fake = install(monkeypatch, soc_id=soc_id)
    reset_process_setup()
    # The engine holds the SoC its pipeline saw: this config's engine as the NPU pipeline
    # builds it on this device (the config itself was made on the host-CPU platform).
    build_engine(cfg, NPUPlatform.platform_soc(), {})
    try:
        fields = NPUPlatform.set_additional_forward_context(vllm_config=cfg, num_tokens=4)
        assert fields["moe_comm_type"] is MoECommType[method]
    finally:
        reset_process_setup()
        fake.close()


def test_the_worker_hook_and_rank_report_carry_the_device_soc(
        monkeypatch: pytest.MonkeyPatch, make_vllm_config: Any, make_engine: Any) -> None:
    """An NPU worker: its engine was resolved for 'A2' (the engine side's device), this
    worker's device says A3 (id 256); the binding and the rank report use the worker's
    reading. No npu-smi here: nothing is bound."""
    from vllm_ascend.worker_duties.duties import bind_rank
    from vllm_ascend.worker_duties.rank_report import build_rank_report

    monkeypatch.setenv("PATH", "/nonexistent")
    cfg = make_vllm_config(enforce_eager=True)
    fake = install(monkeypatch, soc_id=256)
    try:
        binding = bind_rank(cfg, 0, make_engine("A2"), current_process_setup())
        assert binding.soc == "A3" and binding.index is None
        assert binding.lines[0].startswith("CPU binding skipped: npu-smi was not found")
        report = build_rank_report(cfg, rank=0, local_rank=0, binding=binding, stage="device")
        assert report["soc"] == "A3"
    finally:
        fake.close()


def test_a_worker_whose_device_cannot_be_read_keeps_its_affinity(
        monkeypatch: pytest.MonkeyPatch, make_vllm_config: Any, make_engine: Any) -> None:
    import os

    from vllm_ascend.worker_duties.duties import bind_rank

    cfg = make_vllm_config(enforce_eager=True)
    fake = install(monkeypatch, soc_id=104)  # an Ascend910B (first generation)
    try:
        before = os.sched_getaffinity(0)
        binding = bind_rank(cfg, 0, make_engine("A2"), current_process_setup())
        assert binding.soc is None and "Ascend910B (SoC id 104)" in binding.lines[0]
        assert os.sched_getaffinity(0) == before
    finally:
        fake.close()

"""The NPU runtime's pure parts: slot mapping, the per-layer KV view, the model gate, the KV fit
error, the device errors and the V1-runner rule (the runtime itself runs in
tests/integration/test_npu_runtime.py on the emulated device)."""

from __future__ import annotations

import types
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from vllm_ascend.config_pipeline.workers import use_v1_model_runner
from vllm_ascend.npu_runtime import device_check, kv_fit
from vllm_ascend.npu_runtime.attention.kv_layout import split_kv_view
from vllm_ascend.npu_runtime.model_support import (
    UnsupportedModelError,
    refuse_unsupported_model,
    refuse_unsupported_quantization,
)
from vllm_ascend.npu_runtime.slot_mapping import compute_slot_mapping
from vllm_ascend.worker_duties.kv_cache_advice import KvCacheMemoryError, KvCacheNeed

GIB = 1 << 30
MIB = 1 << 20


def test_slot_mapping_maps_positions_through_the_block_table_and_pads_the_rest() -> None:
    block = 4
    table = torch.tensor([[7, 2, 0], [5, 9, 0]], dtype=torch.int32)
    # request 0: positions 3..5 (crosses from its block 7 into block 2); request 1: position 4
    positions = torch.tensor([3, 4, 5, 4], dtype=torch.int64)
    qsl = torch.tensor([0, 3, 4], dtype=torch.int32)
    out = torch.full((7,), 123, dtype=torch.int64)
    compute_slot_mapping(4, 7, qsl, positions, table, 3, out, block)
    # written out: 7*4+3, 2*4+0, 2*4+1, then request 1's block 9 offset 0; padding -1
    assert out.tolist() == [31, 8, 9, 36, -1, -1, -1]


class _AtenLog(TorchDispatchMode):
    """Every aten call with its keyword arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, object]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls.append((str(func.overloadpacket), dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def test_slot_mapping_reads_nothing_back_from_the_device() -> None:
    # A host read is aten._local_scalar_dense (int(t), t.item(), t.tolist()); a
    # repeat_interleave without output_size reads its lengths back to size the output.
    table = torch.tensor([[7, 2, 0], [5, 9, 0]], dtype=torch.int32)
    positions = torch.tensor([3, 4, 5, 4], dtype=torch.int64)
    qsl = torch.tensor([0, 3, 4], dtype=torch.int32)
    out = torch.zeros(8, dtype=torch.int64)
    with _AtenLog() as log:
        compute_slot_mapping(4, 8, qsl, positions, table, 3, out, 4)
    names = [name for name, _ in log.calls]
    assert "aten._local_scalar_dense" not in names
    repeats = [kw for name, kw in log.calls if name == "aten.repeat_interleave"]
    assert repeats and all(kw.get("output_size") == 4 for kw in repeats)
    assert out.tolist() == [31, 8, 9, 36, -1, -1, -1, -1]


def test_slot_mapping_refuses_context_parallelism() -> None:
    with pytest.raises(NotImplementedError, match=r"context parallelism"):
        compute_slot_mapping(1, 1, torch.tensor([0, 1]), torch.tensor([0]),
                             torch.zeros(1, 1, dtype=torch.int32), 1,
                             torch.zeros(1, dtype=torch.int64), 4, TOTAL_CP_WORLD_SIZE=2)


def test_kv_view_covers_the_layer_memory_once_keys_then_values() -> None:
    blocks, heads, size, head = 3, 2, 4, 5
    raw = torch.zeros(2 * blocks * size * heads * 2 * head)  # two layers, layer outermost
    layer1 = raw[raw.numel() // 2:].view(blocks, size, heads, 2 * head).permute(0, 2, 1, 3)
    kv = split_kv_view(layer1)
    assert kv.shape == (2, blocks, size, heads, head) and kv.is_contiguous()
    kv[0].fill_(1.0)
    kv[1].fill_(2.0)
    assert raw[: raw.numel() // 2].eq(0).all()  # the other layer is untouched
    half = raw.numel() // 4
    assert raw[raw.numel() // 2:][:half].eq(1).all() and raw[-half:].eq(2).all()


def test_kv_view_refuses_a_layout_that_interleaves_layers() -> None:
    raw = torch.zeros(2, 3, 2, 4, 10)  # [B, L, H, N, C]: blocks outermost
    with pytest.raises(ValueError, match=r"interleaves layers.*LBNHC"):
        split_kv_view(raw[:, 0])


def _model(**overrides: object) -> types.SimpleNamespace:
    hf = types.SimpleNamespace(**{k: v for k, v in overrides.items() if k.startswith("hf_")})
    hf = types.SimpleNamespace(**{k[3:]: v for k, v in vars(hf).items()})
    fields = {"runner_type": "generate", "is_encoder_decoder": False, "use_mla": False,
              "is_hybrid": False, "is_multimodal_model": False, "model": "m", "quantization": None,
              "architectures": ["XForCausalLM"], "hf_text_config": hf}
    fields.update({k: v for k, v in overrides.items() if not k.startswith("hf_")})
    window = fields.pop("window", None)
    return types.SimpleNamespace(**fields, get_sliding_window=lambda: window)


def test_dense_decoder_passes_and_each_unsupported_feature_is_named() -> None:
    refuse_unsupported_model(_model())
    refuse_unsupported_model(_model(hf_num_experts=1))  # one expert: dense
    refuse_unsupported_model(_model(quantization="ascend"))  # ModelSlim W8A8 runs
    # the MoE models whose experts the runtime runs (vllm_ascend.distributed.npu_moe)
    for arch in ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"):
        refuse_unsupported_model(_model(hf_num_experts=8, architectures=[arch]))
    cases = {
        "mixture-of-experts layers of XForCausalLM \\(MoE runs for Qwen3MoeForCausalLM, "
        "Qwen2MoeForCausalLM\\)": _model(hf_num_experts=8),
        "mixture-of-experts layers of DeepseekV2ForCausalLM": _model(
            hf_num_experts=8, architectures=["DeepseekV2ForCausalLM"]),
        "latent attention": _model(use_mla=True),
        "encoder-decoder": _model(is_encoder_decoder=True),
        "pooling": _model(runner_type="pooling"),
        "sliding-window attention \\(window 4096\\)": _model(window=4096),
        "sparse attention": _model(hf_index_topk=2048),
        "hybrid": _model(is_hybrid=True),
        "'fp8' quantization method \\(the runtime runs unquantized checkpoints and the "
        "methods ascend\\)": _model(quantization="fp8"),
    }
    for needle, config in cases.items():
        with pytest.raises(UnsupportedModelError, match=rf"{needle}.*Supported: dense decoder"):
            refuse_unsupported_model(config)


# Every other method NPUPlatform listed before the runtime said what it runs, and vLLM's fp8
# online quantization of an unquantized checkpoint (``--quantization fp8``).
FORMERLY_LISTED = ("compressed-tensors", "fp8", "deepseek_v4_fp8", "modelopt_mxfp8", "mxfp8")


def test_npu_platform_verifies_ascend_and_names_the_supported_methods_when_refusing() -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    refuse_unsupported_quantization(None)  # unquantized
    NPUPlatform.verify_quantization("ascend")  # ModelSlim W8A8 / W8A8_DYNAMIC
    assert NPUPlatform.supported_quantization == ["ascend"]
    for method in FORMERLY_LISTED:
        with pytest.raises(UnsupportedModelError) as info:
            NPUPlatform.verify_quantization(method)
        assert str(info.value) == (
            f"the Ascend NPU runtime cannot run the '{method}' quantization method; it runs "
            "unquantized checkpoints and the methods ascend")


def test_npu_platform_refuses_a_method_vllm_appended_to_its_list() -> None:
    """vLLM's register_quantization_config appends a custom method to a non-empty platform
    list ("assume supported"): the runtime's own list decides, not the platform attribute."""
    from vllm_ascend.platform.npu import NPUPlatform

    class Listed(NPUPlatform):
        supported_quantization = ["ascend", "fp8"]  # noqa: RUF012 - vLLM's attribute type

    with pytest.raises(UnsupportedModelError, match=r"cannot run the 'fp8' quantization"):
        Listed.verify_quantization("fp8")


# 128 tokens a block, 8 MiB a block (with the null block): one sequence of 1024 tokens needs
# 8 + 1 blocks = 72 MiB.
NEED = KvCacheNeed(block_bytes=8 * MIB, block_size=128, max_model_len=1024, max_num_seqs=4)


def _budget(available: int) -> kv_fit.MemoryBudget:
    return kv_fit.MemoryBudget(device="npu:0", total=32 * GIB, free_at_start=30 * GIB,
                               utilization=0.9, requested=int(28.8 * GIB),
                               non_kv=int(28.8 * GIB) - available, available_for_kv=available)


def test_kv_cache_fit_boundary_and_message() -> None:
    kv_fit.check_kv_cache_fits(_budget(72 * MIB), NEED)  # exactly one sequence fits
    with pytest.raises(KvCacheMemoryError) as info:
        kv_fit.check_kv_cache_fits(_budget(72 * MIB - 1), NEED)
    message = str(info.value)
    for part in ("is available for it (measured on npu:0", "device memory 32.00 GiB",
                 "30.00 GiB free at start", "--gpu-memory-utilization 0.9 allows 28.80 GiB",
                 "max_model_len=1024 needs 72.00 MiB", "--max-model-len 896 (one sequence",
                 "give the KV cache more with --gpu-memory-utilization"):
        assert part in message, part
    with pytest.raises(KvCacheMemoryError, match=r"0.0 KiB is available"):
        kv_fit.check_kv_cache_fits(_budget(-GIB), NEED)  # profiling used more than allowed


def test_kv_cache_fit_names_the_graphs_memory_taken_before_sizing() -> None:
    """The graphs' 8 MiB were taken from the share: 64 MiB are left where one sequence needs
    72 MiB, and the message says what the graphs took and how to capture fewer."""
    budget = replace(_budget(72 * MIB), available_for_kv=64 * MIB, graphs=8 * MIB)
    with pytest.raises(KvCacheMemoryError) as info:
        kv_fit.check_kv_cache_fits(budget, NEED)
    message = str(info.value)
    for part in ("64.00 MiB is available for it",
                 "weights and activations take 28.73 GiB and the graphs it captures 8.00 MiB "
                 "(profiled before the KV cache is sized)",
                 "max_model_len=1024 needs 72.00 MiB",
                 "or capture fewer graphs: fewer compilation_config cudagraph_capture_sizes, "
                 "or --enforce-eager"):
        assert part in message, part
    assert "graphs it captures" not in str(_raises(_budget(64 * MIB)))


def _raises(budget: kv_fit.MemoryBudget) -> KvCacheMemoryError:
    with pytest.raises(KvCacheMemoryError) as info:
        kv_fit.check_kv_cache_fits(budget, NEED)
    return info.value


class _Runner:
    """A model runner whose graph-memory profile answers ``estimate`` (or runs out of memory)."""

    def __init__(self, estimate: int | None) -> None:
        self.estimate = estimate
        self.profiles = 0
        self.vllm_graph_estimate = 2 * (estimate or 0)  # vLLM's extrapolation, for the log

    def profile_cudagraph_memory(self) -> int:
        self.profiles += 1
        if self.estimate is None:
            raise torch.OutOfMemoryError("NPU out of memory. Tried to allocate 4.00 MiB")
        return self.estimate


def _graph_memory(mode: str, runner: _Runner) -> tuple[int, types.SimpleNamespace]:
    from vllm.config import CUDAGraphMode
    from vllm_ascend.npu_runtime.worker import NPUWorker

    worker = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(cudagraph_mode=CUDAGraphMode[mode]),
        model_runner=runner, peak_activation_memory=3 * MIB)
    return NPUWorker._graph_memory(worker, 40 * MIB), worker  # type: ignore[arg-type]


def test_graph_memory_is_profiled_and_applied_as_vllm_applies_it(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _Runner(5 * MIB)
    assert _graph_memory("NONE", runner)[0] == 0 and runner.profiles == 0  # eager: no profile
    taken, worker = _graph_memory("FULL_DECODE_ONLY", runner)
    assert (taken, worker.cudagraph_memory_estimate) == (5 * MIB, 5 * MIB)
    assert worker.peak_activation_memory == 8 * MIB  # vLLM counts the graphs as a peak too
    assert worker.graph_memory_applied == 5 * MIB  # what the report after capture starts from
    monkeypatch.setenv("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0")
    taken, worker = _graph_memory("FULL_AND_PIECEWISE", runner)
    # Measured (vLLM logs it against the capture) but not taken from the KV cache.
    assert (taken, worker.cudagraph_memory_estimate) == (0, 5 * MIB)
    assert worker.peak_activation_memory == 3 * MIB and runner.profiles == 2


def test_a_device_too_small_for_the_graph_profile_says_what_to_change() -> None:
    with pytest.raises(torch.OutOfMemoryError) as info:
        _graph_memory("FULL_DECODE_ONLY", _Runner(None))
    message = str(info.value)
    assert message.startswith("NPU out of memory. Tried to allocate 4.00 MiB")
    for part in ("while profiling what its graphs need (before the KV cache is sized)",
                 "cudagraph_capture_sizes", "--max-num-seqs", "--enforce-eager"):
        assert part in message, part


def test_explicit_kv_cache_bytes_must_fit_and_hold_one_sequence() -> None:
    kv_fit.check_explicit_kv_cache("npu:0", 72 * MIB, 72 * MIB, NEED)
    with pytest.raises(KvCacheMemoryError, match=r"more than the 72.00 MiB free on npu:0"):
        kv_fit.check_explicit_kv_cache("npu:0", 72 * MIB + 1, 72 * MIB, NEED)
    with pytest.raises(KvCacheMemoryError,
                       match=r"--kv-cache-memory-bytes 75497471 on npu:0.*--max-model-len 896"):
        kv_fit.check_explicit_kv_cache("npu:0", 72 * MIB - 1, GIB, NEED)


def test_torch_npu_missing_or_broken_names_cann_set_env() -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError("No module named 'torch_npu'")

    def broken(name: str) -> None:
        raise ImportError("libhccl.so: cannot open shared object file")

    for importer, why in ((missing, "not installed"), (broken, "cannot be imported")):
        with pytest.raises(device_check.NpuUnavailableError, match=rf"{why}.*set_env.sh"):
            device_check.import_torch_npu(importer)


def test_no_npu_visible_and_too_few_npus() -> None:
    device_check.check_device_index(1, 2, None)
    with pytest.raises(device_check.NpuUnavailableError, match=r"no NPU is visible.*set_env.sh"):
        device_check.check_device_index(0, 0, "")
    with pytest.raises(device_check.NpuUnavailableError,
                       match=r"needs NPU 2.*only 2 NPU.*ASCEND_RT_VISIBLE_DEVICES='0,1'"):
        device_check.check_device_index(2, 2, "0,1")


def test_the_npu_pipeline_keeps_vllm_on_the_v1_runner() -> None:
    env: dict[str, str] = {}
    use_v1_model_runner(env)
    assert env == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    kept = {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    use_v1_model_runner(kept)
    assert kept == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    with pytest.raises(ValueError, match=r"V1 model runner only.*unset VLLM_USE_V2_MODEL_RUNNER"):
        use_v1_model_runner({"VLLM_USE_V2_MODEL_RUNNER": "1"})


def test_padding_slots_become_distinct_null_block_slots_without_a_host_read() -> None:
    from vllm_ascend.npu_runtime.attention.impl import real_slots

    slots = torch.tensor([517, -1, 260, -1, -1], dtype=torch.int64)
    with _AtenLog() as log:
        got = real_slots(slots)
    assert "aten._local_scalar_dense" not in [name for name, _ in log.calls]
    # real slots kept; the padding rows get 0, 1, 2: block 0 (vLLM's null block), distinct
    assert got.tolist() == [517, 0, 260, 1, 2]
    assert real_slots(torch.tensor([3, 4])).tolist() == [3, 4]

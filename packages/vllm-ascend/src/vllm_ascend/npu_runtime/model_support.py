"""Which models the NPU runtime runs: dense decoder-only text generation with full causal
attention (the llama, qwen2 and qwen3 families and models built like them). Anything else is
refused before weights load, with one error naming what is supported."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.config import ModelConfig

RUNTIME_WORKER = "vllm_ascend.npu_runtime.worker.NPUWorker"
SUPPORTED = (
    "dense decoder-only text-generation models with full causal attention (llama, qwen2, "
    "qwen3 families)"
)


class UnsupportedModelError(ValueError):
    """The model needs something the NPU runtime does not provide."""


def unsupported_features(model_config: ModelConfig) -> list[str]:
    """What the model needs that the runtime lacks (empty: supported)."""
    hf = model_config.hf_text_config
    found = []
    if getattr(model_config, "runner_type", "generate") != "generate":
        found.append(f"the {model_config.runner_type!r} runner (pooling)")
    if getattr(model_config, "is_encoder_decoder", False):
        found.append("an encoder-decoder architecture")
    if getattr(model_config, "use_mla", False) or getattr(hf, "kv_lora_rank", None):
        found.append("multi-head latent attention (MLA)")
    experts = [getattr(hf, name, None) for name in
               ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")]
    if any(isinstance(n, int) and n > 1 for n in experts):
        found.append("mixture-of-experts layers")
    if getattr(hf, "index_topk", None) or getattr(hf, "use_sparse_attention", False):
        found.append("sparse attention")
    if getattr(model_config, "is_hybrid", False):
        found.append("hybrid (state-space or linear attention) layers")
    window = model_config.get_sliding_window()  # None unless the model really uses one
    if window:
        found.append(f"sliding-window attention (window {window})")
    if getattr(model_config, "is_multimodal_model", False):
        found.append("multimodal inputs")
    return found


def refuse_unsupported_model(model_config: ModelConfig) -> None:
    """UnsupportedModelError naming every missing feature and what is supported."""
    found = unsupported_features(model_config)
    if found:
        archs = ", ".join(getattr(model_config, "architectures", None) or ["?"])
        raise UnsupportedModelError(
            f"the Ascend NPU runtime cannot run {model_config.model} ({archs}): it needs "
            f"{'; '.join(found)}. Supported: {SUPPORTED}"
        )

"""Which models the NPU runtime runs (dense decoders and Qwen2/Qwen3-MoE, unquantized or ModelSlim
W8A8); anything else is refused before weights load with one error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_ascend.distributed.moe_comm import select_moe_comm_method

if TYPE_CHECKING:
    from vllm.config import ModelConfig

    from vllm_ascend.base.forward_context import AscendForwardState

RUNTIME_WORKER = "vllm_ascend.npu_runtime.worker.NPUWorker"
#: The mixture-of-experts models whose MoE layers the runtime runs (vLLM's own classes; their
#: experts go through vllm_ascend.distributed.npu_moe).
MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM")
SUPPORTED = (
    "dense decoder-only text-generation models with full causal attention (llama, qwen2, "
    f"qwen3 families) and the mixture-of-experts {', '.join(MOE_ARCHITECTURES)}"
)

# The quantization methods whose linear layers the NPU runtime runs: ModelSlim's "ascend"
# (quantization.npu_linear_methods, through npu_quant_matmul). Every other method is refused
# while vLLM builds the model config.
SUPPORTED_QUANTIZATION: tuple[str, ...] = ("ascend",)


class UnsupportedModelError(ValueError):
    """The model needs something the NPU runtime does not provide."""


def supported_quantization_text() -> str:
    """What the NPU runtime runs, in words, for the refusals."""
    if not SUPPORTED_QUANTIZATION:
        return "unquantized checkpoints only, no quantization method"
    return f"unquantized checkpoints and the methods {', '.join(SUPPORTED_QUANTIZATION)}"


def refuse_unsupported_quantization(method: str | None) -> None:
    """UnsupportedModelError when quantization ``method`` (None: unquantized) is not one it runs."""
    if method is None or method in SUPPORTED_QUANTIZATION:
        return
    raise UnsupportedModelError(
        f"the Ascend NPU runtime cannot run the {method!r} quantization method; it runs "
        f"{supported_quantization_text()}"
    )


def unsupported_features(model_config: ModelConfig) -> list[str]:
    """What the model needs that the runtime lacks (empty: supported)."""
    hf = model_config.hf_text_config
    found = []
    method = getattr(model_config, "quantization", None)  # set by the config pipeline too
    if method is not None and method not in SUPPORTED_QUANTIZATION:
        found.append(f"the {method!r} quantization method (the runtime runs "
                     f"{supported_quantization_text()})")
    if getattr(model_config, "runner_type", "generate") != "generate":
        found.append(f"the {model_config.runner_type!r} runner (pooling)")
    if getattr(model_config, "is_encoder_decoder", False):
        found.append("an encoder-decoder architecture")
    if getattr(model_config, "use_mla", False) or getattr(hf, "kv_lora_rank", None):
        found.append("multi-head latent attention (MLA)")
    experts = [getattr(hf, name, None) for name in
               ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")]
    archs = list(getattr(model_config, "architectures", None) or [])
    if any(isinstance(n, int) and n > 1 for n in experts) and not (
            archs and all(a in MOE_ARCHITECTURES for a in archs)):
        found.append(f"mixture-of-experts layers of {', '.join(archs) or 'this model'} (MoE "
                     f"runs for {', '.join(MOE_ARCHITECTURES)})")
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


def refuse_unexecuted_moe_method(state: AscendForwardState, max_num_batched_tokens: int) -> None:
    """UnsupportedModelError when the decision table picks an MoE communication method the runtime
    does not execute (e.g. MC2 with EP on A3/A5), before weights load."""
    inputs = state.moe_inputs
    if not inputs.is_moe:
        return
    runs = sorted(m.name for m in state.comm_methods)
    for kind, tokens in (("decode", inputs.decode_tokens), ("prefill", max_num_batched_tokens)):
        method = select_moe_comm_method(tokens, inputs)
        if method is not None and method not in state.comm_methods:
            raise UnsupportedModelError(
                f"the Ascend NPU runtime cannot run this MoE model's {kind} forwards "
                f"({tokens} tokens) on SoC {inputs.soc}: the MoE communication method is "
                f"{method.name}, and the runtime runs {', '.join(runs) or 'none'}; run it "
                f"without --enable-expert-parallel (or on a SoC whose table picks those)")

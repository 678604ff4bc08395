"""Tiny W8A8 models (ModelSlim layout, quantization method "ascend") for the tests.

`make_tiny_quant_model` quantizes the decoder linears of a `make_tiny_model` checkpoint
(`vllm_ascend.checkpoints.tiny_models`), calibrating static activation ranges on the tokenizer's
training text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from vllm_ascend.checkpoints.tiny_models import TOKENIZER_CORPUS, make_tiny_model


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


QUANT_ARCHES: Final = ("llama", "qwen3")
# Scheme per decoder linear module, by name. "mixed" covers every path in one model: static
# attention projections, dynamic gate/up, a float down_proj.
_ATTN: Final = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP: Final = ("gate_proj", "up_proj", "down_proj")
QUANT_SCHEMES: Final[dict[str, dict[str, str]]] = {
    "w8a8": dict.fromkeys(_ATTN + _MLP, "W8A8"),
    "w8a8_dynamic": dict.fromkeys(_ATTN + _MLP, "W8A8_DYNAMIC"),
    "mixed": {
        **dict.fromkeys(_ATTN, "W8A8"),
        "gate_proj": "W8A8_DYNAMIC", "up_proj": "W8A8_DYNAMIC", "down_proj": "FLOAT",
    },
}  # fmt: skip
QUANT_DESCRIPTION_FILE: Final = "quant_model_description.json"


def _calibrate_inputs(model: Any, out: Path, modules: dict[str, Any]) -> dict[str, Any]:
    """Min/max of each module's input over the tokenizer corpus: static activation ranges."""
    import torch
    from transformers import AutoTokenizer

    seen: dict[str, Any] = {}

    def observe(name: str) -> Any:
        def hook(_module: Any, args: tuple[Any, ...]) -> None:
            x = args[0].detach().float()
            lo, hi = x.min(), x.max()
            if name in seen:
                lo, hi = torch.minimum(lo, seen[name][0]), torch.maximum(hi, seen[name][1])
            seen[name] = (lo, hi)

        return hook

    handles = [m.register_forward_pre_hook(observe(n)) for n, m in modules.items()]
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    try:
        with torch.no_grad():
            for text in TOKENIZER_CORPUS:
                model(torch.tensor([tokenizer(text)["input_ids"]]))
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _quantize_module(weight: Any, scheme: str, x_range: Any, dtype: Any) -> dict[str, Any]:
    """ModelSlim tensors of one linear module, in ModelSlim's names and dtypes (model dtype
    ``dtype``): a symmetric per-channel int8 ``weight``; W8A8_DYNAMIC its ``weight_scale`` /
    ``weight_offset`` ``[n, 1]``; W8A8 an asymmetric per-tensor ``input_scale`` /
    ``input_offset`` ``[1]`` covering the calibrated range, ``quant_bias`` int32 ``[n]`` and
    ``deq_scale`` ``[n]`` (float32, or int64 holding the float32 bits for fp16 models), so that
    ``y = (q_x @ weight.T + quant_bias) * deq_scale``."""
    import torch

    w = weight.detach().float()
    w_scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp_min(1e-12)
    q_w = torch.round(w / w_scale).clamp(-128, 127).to(torch.int8)
    if scheme == "W8A8_DYNAMIC":
        return {"weight": q_w, "weight_scale": w_scale.to(dtype),
                "weight_offset": torch.zeros_like(w_scale).to(dtype)}
    lo, hi = torch.clamp(x_range[0], max=0.0), torch.clamp(x_range[1], min=0.0)
    # The stored (model-dtype) scale is the one the layer divides by: fold that one.
    scale = ((hi - lo) / 255.0).clamp_min(1e-8).reshape(1).to(dtype)
    # q = round(x / scale + offset) maps lo to -128 and hi to 127.
    offset = torch.round(-128.0 - lo / scale.float()).clamp(-128, 127).reshape(1)
    # sum_k (q_x - o) * q_w = q_x @ q_w.T - o * sum_k q_w: the offset term is the int32 bias.
    quant_bias = (-offset.to(torch.int64) * q_w.to(torch.int64).sum(dim=1)).to(torch.int32)
    deq = (scale.float() * w_scale.reshape(-1)).to(torch.float32)
    if dtype == torch.float16:
        deq = deq.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return {"weight": q_w, "input_scale": scale, "input_offset": offset.to(dtype),
            "quant_bias": quant_bias, "deq_scale": deq}


def make_tiny_quant_model(
    arch: str,
    path: str | Path,
    *,
    scheme: str = "mixed",
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 64,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """The `make_tiny_model` model with its decoder linears quantized for method "ascend".

    `scheme`: "w8a8" (static activations), "w8a8_dynamic" (per-token), or "mixed" (static
    attention, dynamic gate/up, float down_proj). Writes each quantized module's tensors in
    ModelSlim's names and dtypes (`_quantize_module`), `quant_model_description.json`, and
    the same description as config.json's `quantization_config` (`quant_method: "ascend"`)
    so vLLM picks the method by itself.
    """
    _require(arch in QUANT_ARCHES,
             f"arch={arch!r} has no quantized variant; allowed: {', '.join(QUANT_ARCHES)}")
    _require(scheme in QUANT_SCHEMES,
             f"scheme={scheme!r} is not supported; allowed: {', '.join(QUANT_SCHEMES)}")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    out = make_tiny_model(arch, path, layers=layers, hidden=hidden, heads=heads,
                          kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, seed=seed)
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    per_module = QUANT_SCHEMES[scheme]
    targets = {name: module for name, module in model.named_modules()
               if per_module.get(name.rpartition(".")[2], "FLOAT") != "FLOAT"}
    ranges = _calibrate_inputs(model, out, targets)
    tensors: dict[str, Any] = {}
    description: dict[str, str] = {"model_quant_type": scheme.upper(), "version": "1.0.0"}
    for name, tensor in model.state_dict().items():
        module, _, leaf = name.rpartition(".")
        if module in targets and leaf == "weight":
            module_scheme = per_module[module.rpartition(".")[2]]
            parts = _quantize_module(tensor, module_scheme, ranges.get(module),
                                     getattr(torch, dtype))
            for suffix, value in parts.items():
                tensors[f"{module}.{suffix}"] = value.contiguous()
                description[f"{module}.{suffix}"] = module_scheme
        else:
            tensors[name] = tensor.to(getattr(torch, dtype)).contiguous()
            description[name] = "FLOAT"
    for old in out.glob("model*.safetensors*"):
        old.unlink()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    text = json.dumps(description, indent=2, sort_keys=True) + "\n"
    (out / QUANT_DESCRIPTION_FILE).write_text(text)
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "ascend", **description}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out

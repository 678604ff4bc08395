"""An independent reference for ModelSlim W8A8 / W8A8_DYNAMIC checkpoints: greedy tokens.

Hugging Face transformers runs the checkpoint's float parts (embedding, norms, attention,
lm_head) in the model dtype; each quantized linear is replaced by the ModelSlim formulas
computed in float32 from the checkpoint's own tensors, cast once to the model dtype:

- ``W8A8``: ``q = clamp(round(x / input_scale + input_offset), -128, 127)``, then
  ``y = (q @ weight.T + quant_bias) * deq_scale`` (an int64 ``deq_scale`` holds float32 bits);
- ``W8A8_DYNAMIC``: per token ``s = amax(|x|) / 127``, ``q = clamp(round(x / s))``, then the
  dequantized product ``(q * s) @ (weight * weight_scale).T``.

Nothing here calls ``vllm_ascend`` or ``ascend_kernels``: the formulas are written out again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DESCRIPTION = "quant_model_description.json"


def deq_scale_values(deq_scale: Any) -> Any:
    """float32 values of a ModelSlim ``deq_scale`` (int64: the float32 bits in the low half)."""
    import numpy as np
    import torch

    if deq_scale.dtype != torch.int64:
        return deq_scale.float()
    bits = deq_scale.numpy().astype(np.uint64) & np.uint64(0xFFFFFFFF)
    return torch.from_numpy(bits.astype(np.uint32).view(np.float32).copy())


def _linear_class() -> Any:
    import torch

    class ReferenceQuantLinear(torch.nn.Module):
        """One quantized linear module of the checkpoint, computed in float32."""

        def __init__(self, scheme: str, tensors: dict[str, Any], bias: Any) -> None:
            super().__init__()
            self.scheme = scheme
            self.t = {k: v.clone() for k, v in tensors.items()}
            self.bias = bias

        def forward(self, x: Any) -> Any:
            t, xf = self.t, x.float()
            w = t["weight"].float()
            if self.scheme == "W8A8":
                q = torch.round(xf / t["input_scale"].float() + t["input_offset"].float())
                q = q.clamp(-128, 127)
                y = (q @ w.T + t["quant_bias"].float()) * deq_scale_values(t["deq_scale"])
            elif self.scheme == "W8A8_DYNAMIC":
                s = xf.abs().amax(dim=-1, keepdim=True) / 127.0
                q = torch.round(xf / torch.where(s == 0, 1.0, s)).clamp(-128, 127)
                y = (q * s) @ (w * t["weight_scale"].float().reshape(-1, 1)).T
            else:
                raise ValueError(f"no reference for scheme {self.scheme!r}")
            if self.bias is not None:
                y = y + self.bias.float()
            return y.to(x.dtype)

    return ReferenceQuantLinear


def load_reference_model(path: str | Path, dtype: str = "float32") -> Any:
    """The checkpoint at ``path`` as a transformers model with reference quantized linears."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    root = Path(path)
    description = json.loads((root / DESCRIPTION).read_text())
    config = AutoConfig.from_pretrained(str(root))
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype,
                                             attn_implementation="eager").eval()
    tensors = load_file(str(root / "model.safetensors"))
    quantized = {name.rpartition(".")[0]: scheme for name, scheme in description.items()
                 if name.endswith(".weight") and scheme not in ("FLOAT",) and "." in name}
    cls = _linear_class()
    for module_name, scheme in quantized.items():
        prefix = module_name + "."
        parts = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        parent_name, _, leaf = module_name.rpartition(".")
        parent = model.get_submodule(parent_name)
        bias = parts.pop("bias", None)
        setattr(parent, leaf, cls(scheme, parts, bias))
    floats = {k: v for k, v in tensors.items() if k.rpartition(".")[0] not in quantized}
    missing, unexpected = model.load_state_dict(floats, strict=False)
    left = [k for k in missing if k.rpartition(".")[0] not in quantized
            and not k.endswith("lm_head.weight")]
    if left or unexpected:
        raise ValueError(f"checkpoint does not match the model: missing {left}, "
                         f"unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


def reference_greedy(path: str | Path, prompts: Sequence[Sequence[int]], max_tokens: int,
                     dtype: str = "float32") -> list[list[int]]:
    """Greedy continuation (EOS not special) of each token-id prompt, recomputed in full at
    every step."""
    import torch

    model = load_reference_model(path, dtype)
    found: list[list[int]] = []
    with torch.no_grad():
        for prompt in prompts:
            ids = list(prompt)
            for _ in range(max_tokens):
                logits = model(torch.tensor([ids])).logits[0, -1]
                ids.append(int(logits.float().argmax()))
            found.append(ids[len(prompt):])
    return found

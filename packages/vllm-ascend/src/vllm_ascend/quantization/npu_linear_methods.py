"""The ModelSlim W8A8 / W8A8_DYNAMIC linear methods of the NPU runtime (``npu_quant_matmul``)."""
# Weights transposed to [K, N] and cast to fractal NZ once after loading (the kernel docs' layout
# for A2/A3); the kernel outputs only float16 or bfloat16.

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch

from vllm_ascend.quantization.linear_methods import (
    AscendW8A8DynamicLinearMethod,
    AscendW8A8LinearMethod,
    _AscendW8A8Base,
    _frozen,
    adds_quant_bias,
)

NPU_OUTPUT_DTYPES = (torch.bfloat16, torch.float16)


def _torch_npu() -> ModuleType:
    return importlib.import_module("torch_npu")


def _check_dtype(layer: torch.nn.Module, scheme: str) -> None:
    mod: Any = layer
    if mod.ascend_act_dtype not in NPU_OUTPUT_DTYPES:
        raise ValueError(
            f"{getattr(mod, 'prefix', 'layer')}: {scheme} layers on the Ascend NPU runtime "
            f"need the model dtype bfloat16 or float16 (npu_quant_matmul's outputs), got "
            f"{mod.ascend_act_dtype}; pass --dtype bfloat16 or float16"
        )


def _nz_weight(layer: torch.nn.Module) -> None:
    """``weight`` ``[N, K]`` -> ``[K, N]`` in fractal NZ, once."""
    from ascend_kernels.weight_format import ACL_FORMAT_FRACTAL_NZ

    mod: Any = layer
    kn = mod.weight.data.t().contiguous()
    mod.weight = _frozen(_torch_npu().npu_format_cast(kn, ACL_FORMAT_FRACTAL_NZ))


def _matmul(x: torch.Tensor, q: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
            float_bias: torch.Tensor | None, **kwargs: Any) -> torch.Tensor:
    """``npu_quant_matmul`` on the rows of ``q``, shaped like ``x`` (+ the layer's float bias)."""
    rows = q.reshape(-1, q.shape[-1])
    y: torch.Tensor = _torch_npu().npu_quant_matmul(rows, weight, scale,
                                                    output_dtype=x.dtype, **kwargs)
    if float_bias is not None:
        y = y + float_bias
    return y.reshape(*x.shape[:-1], weight.shape[-1])


class NpuW8A8LinearMethod(AscendW8A8LinearMethod):
    """Static W8A8 through ``npu_quantize`` and ``npu_quant_matmul``."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        _check_dtype(layer, self.scheme)
        super().process_weights_after_loading(layer)
        _nz_weight(layer)

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        mod: Any = layer
        q = torch.ops.ascend.quantize(x, mod.input_scale, mod.input_offset)
        quant_bias = mod.quant_bias if adds_quant_bias(layer) else None
        return _matmul(x, q, mod.weight, mod.deq_scale, bias, bias=quant_bias)


class NpuW8A8DynamicLinearMethod(AscendW8A8DynamicLinearMethod):
    """Per-token W8A8 through ``npu_dynamic_quant`` and ``npu_quant_matmul``."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        _check_dtype(layer, self.scheme)
        super().process_weights_after_loading(layer)
        mod: Any = layer
        if mod.weight_offset is not None:
            raise ValueError(
                f"{getattr(mod, 'prefix', 'layer')}: W8A8_DYNAMIC on the Ascend NPU runtime "
                "needs symmetric weights (weight_offset all zero): npu_quant_matmul's "
                "per-token form takes no weight offset"
            )
        _nz_weight(layer)

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        mod: Any = layer
        q, scale = torch.ops.ascend.dynamic_quant(x)
        return _matmul(x, q, mod.weight, mod.weight_scale, bias,
                       pertoken_scale=scale.reshape(-1))


NPU_LINEAR_METHODS: dict[str, type[_AscendW8A8Base]] = {
    NpuW8A8LinearMethod.scheme: NpuW8A8LinearMethod,
    NpuW8A8DynamicLinearMethod.scheme: NpuW8A8DynamicLinearMethod,
}

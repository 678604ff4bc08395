"""vLLM linear methods for ModelSlim W8A8 (static) and W8A8_DYNAMIC checkpoints on the host CPU."""
# Activations are quantized on the layer input as it arrives so the norm_quant pass finds its idiom;
# the checkpoint tensors are listed in the package README's quantization notes.

from __future__ import annotations

from typing import Any

import torch
from torch.nn import Parameter
from vllm.model_executor.layers.linear import LinearMethodBase
from vllm.model_executor.parameter import (
    ChannelQuantScaleParameter,
    ModelWeightParameter,
    PerTensorScaleParameter,
)

from vllm_ascend.quantization.int8_matmul import (
    deq_scale_float32,
    int8_linear,
    int8_linear_dequant,
)


def _frozen(data: torch.Tensor) -> Parameter:
    return Parameter(data.contiguous(), requires_grad=False)


def deq_scale_dtype(params_dtype: torch.dtype) -> torch.dtype:
    """ModelSlim's ``deq_scale`` dtype: int64 (float32 bits) for fp16 models, else float32."""
    return torch.int64 if params_dtype == torch.float16 else torch.float32


def adds_quant_bias(layer: torch.nn.Module) -> bool:
    """Whether this rank adds ``quant_bias`` (TP rank 0 only of a row-parallel layer)."""
    from vllm.model_executor.layers.linear import RowParallelLinear

    return not isinstance(layer, RowParallelLinear) or getattr(layer, "tp_rank", 0) == 0


class _AscendW8A8Base(LinearMethodBase):
    """Per-channel int8 weight with scale and offset; subclasses quantize the activation."""

    scheme = ""

    def create_weights(
        self,
        layer: torch.nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        import ascend_kernels  # noqa: F401 - registers torch.ops.ascend.* used by apply()

        loader = extra_weight_attrs["weight_loader"]
        rows = sum(output_partition_sizes)
        mod: Any = layer
        mod.logical_widths = output_partition_sizes
        mod.ascend_act_dtype = params_dtype
        layer.register_parameter("weight", ModelWeightParameter(
            data=torch.empty(rows, input_size_per_partition, dtype=torch.int8),
            input_dim=1, output_dim=0, weight_loader=loader,
        ))  # fmt: skip
        for name in ("weight_scale", "weight_offset"):
            layer.register_parameter(name, ChannelQuantScaleParameter(
                data=torch.empty(rows, 1, dtype=torch.float32), output_dim=0,
                weight_loader=loader,
            ))  # fmt: skip
        self.create_activation_params(layer, output_partition_sizes, loader)

    def create_activation_params(
        self, layer: torch.nn.Module, output_partition_sizes: list[int], loader: Any
    ) -> None:
        """Checkpoint parameters of the activation quantization (none when dynamic)."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        mod: Any = layer
        mod.weight = _frozen(mod.weight.data)
        mod.weight_scale = _frozen(mod.weight_scale.data.reshape(-1).to(torch.float32))
        offset = mod.weight_offset.data.reshape(-1).to(torch.float32)
        # Symmetric weights (ModelSlim's usual export) skip the offset terms of the matmul.
        mod.weight_offset = _frozen(offset) if bool(offset.any()) else None


class AscendW8A8LinearMethod(_AscendW8A8Base):
    """Static per-tensor int8 activation and per-channel int8 weight."""

    scheme = "W8A8"

    def create_activation_params(
        self, layer: torch.nn.Module, output_partition_sizes: list[int], loader: Any
    ) -> None:
        # One value per fused part (q/k/v, gate/up): they quantize the same input.
        for name in ("input_scale", "input_offset"):
            layer.register_parameter(name, PerTensorScaleParameter(
                data=torch.empty(len(output_partition_sizes), dtype=torch.float32),
                weight_loader=loader,
            ))  # fmt: skip
        rows = sum(output_partition_sizes)
        mod: Any = layer
        layer.register_parameter("quant_bias", ChannelQuantScaleParameter(
            data=torch.zeros(rows, dtype=torch.int32), output_dim=0, weight_loader=loader,
        ))  # fmt: skip
        layer.register_parameter("deq_scale", ChannelQuantScaleParameter(
            data=torch.empty(rows, dtype=deq_scale_dtype(mod.ascend_act_dtype)), output_dim=0,
            weight_loader=loader,
        ))  # fmt: skip

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        mod: Any = layer
        where = getattr(mod, "prefix", "layer")
        mod.weight = _frozen(mod.weight.data)
        # weight_scale/offset are accepted from the checkpoint but folded into deq_scale.
        mod.weight_scale = mod.weight_offset = None
        try:
            deq = deq_scale_float32(mod.deq_scale.data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if not bool(torch.isfinite(deq).all()):
            raise ValueError(f"{where}: deq_scale holds non-finite values")
        mod.deq_scale = _frozen(mod.deq_scale.data)
        mod.quant_bias = _frozen(mod.quant_bias.data.to(torch.int32))
        for name in ("input_scale", "input_offset"):
            values = getattr(mod, name).data
            if not bool(torch.all(values == values[0])):
                raise ValueError(
                    f"{where}: the fused parts have different {name} values "
                    f"{values.tolist()}; a W8A8 layer quantizes its input once, so its parts "
                    "need one static scale and offset"
                )
            # The NPU quantize kernels take scale/offset in the activation dtype.
            setattr(mod, name, _frozen(values[:1].to(mod.ascend_act_dtype)))
        if not bool((mod.input_scale > 0).all()):
            raise ValueError(f"{where}: input_scale must be > 0, got {mod.input_scale.tolist()}")

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        mod: Any = layer
        q = torch.ops.ascend.quantize(x, mod.input_scale, mod.input_offset)
        return int8_linear_dequant(
            q, mod.weight, mod.deq_scale,
            quant_bias=mod.quant_bias if adds_quant_bias(layer) else None, bias=bias,
            out_dtype=x.dtype,
        )  # fmt: skip


class AscendW8A8DynamicLinearMethod(_AscendW8A8Base):
    """Per-token dynamic int8 activation and per-channel int8 weight."""

    scheme = "W8A8_DYNAMIC"

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        mod: Any = layer
        q, scale = torch.ops.ascend.dynamic_quant(x)
        return int8_linear(
            q, scale, mod.weight, mod.weight_scale,
            w_offset=mod.weight_offset, bias=bias, out_dtype=x.dtype,
        )  # fmt: skip


LINEAR_METHODS: dict[str, type[_AscendW8A8Base]] = {
    AscendW8A8LinearMethod.scheme: AscendW8A8LinearMethod,
    AscendW8A8DynamicLinearMethod.scheme: AscendW8A8DynamicLinearMethod,
}

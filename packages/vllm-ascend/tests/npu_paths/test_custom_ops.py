"""The CustomOp table: one test per row, on both platforms' forward paths.

For every row, the vLLM class is built the way models build it (``get_rope`` with the row's
``rope_parameters``, or the class itself); the instance must be the Ascend class, vLLM's own
dispatch on this (host-CPU) platform must run the row's ``torch.ops.ascend.*`` ops, the result
must equal vLLM's native forward, and ``forward_oot`` (the NPU platform's path) must reach the
torch_npu kernels through the fake seam.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend.*)
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from vllm_ascend.ops.custom_ops import (
    ASCEND_CUSTOM_OPS,
    CustomOpRow,
    all_custom_ops,
    native_directives,
    register_ascend_custom_ops,
)

T = 5  # tokens


class AscendOpCounter(TorchDispatchMode):
    """Counts the ``torch.ops.ascend.*`` calls made under it."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace == "ascend":
            self.counts[func._opname] += 1
        return func(*args, **(kwargs or {}))


def _rope(params: dict[str, Any] | None, *, neox: bool = True, head: int = 64,
          rotary_dim: int | None = None) -> Callable[[], Any]:
    def build() -> Any:
        from vllm.model_executor.layers.rotary_embedding import _ROPE_DICT, get_rope

        _ROPE_DICT.clear()  # get_rope caches instances across registrations
        full = dict(params or {})
        if rotary_dim is not None:
            full["partial_rotary_factor"] = rotary_dim / head
        return get_rope(head, 512, neox, full or None, torch.float32)

    return build


def _rope_inputs(layer: Any) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(11)
    head = layer.head_size
    if type(layer).__name__.startswith("AscendDeepseek"):  # MLA: [T, heads, rope_dim]
        return (torch.randint(0, 500, (T,), generator=g), torch.randn(T, 4, head, generator=g),
                torch.randn(T, 1, head, generator=g))
    positions = (torch.randint(0, 500, (3, T), generator=g)
                 if getattr(layer, "mrope_section", None) else
                 torch.randint(0, 500, (T,), generator=g))
    return (positions, torch.randn(T, 4 * head, generator=g),
            torch.randn(T, 2 * head, generator=g))


def _silu() -> Any:
    from vllm.model_executor.layers.activation import SiluAndMul

    return SiluAndMul()


def _gemma() -> Any:
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm

    layer = GemmaRMSNorm(96, eps=1e-6)
    with torch.no_grad():
        layer.weight.copy_(0.1 * torch.randn(96, generator=torch.Generator().manual_seed(5)))
    return layer


def _llama3() -> dict[str, Any]:
    return {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


#: Row name -> (builder, inputs, torch_npu kernels forward_oot must reach).
ROW_CASES: dict[str, tuple[Callable[[], Any], Callable[[Any], tuple[Any, ...]], set[str]]] = {
    "RotaryEmbedding": (_rope(None, rotary_dim=32), _rope_inputs, set()),  # partial: reference
    "Llama3RotaryEmbedding": (_rope(_llama3()), _rope_inputs, {"npu_mrope"}),
    "YaRNScalingRotaryEmbedding": (
        _rope({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}),
        _rope_inputs, {"npu_mrope"}),
    "LinearScalingRotaryEmbedding": (_rope({"rope_type": "linear", "factor": 2.0}),
                                     _rope_inputs, {"npu_mrope"}),
    "NTKScalingRotaryEmbedding": (_rope({"rope_type": "ntk", "factor": 2.0}), _rope_inputs,
                                  {"npu_mrope"}),
    "DynamicNTKScalingRotaryEmbedding": (_rope({"rope_type": "dynamic", "factor": 2.0}),
                                         _rope_inputs, {"npu_mrope"}),
    "DynamicNTKAlphaRotaryEmbedding": (_rope({"rope_type": "dynamic", "alpha": 2.0}),
                                       _rope_inputs, {"npu_mrope"}),
    "DeepseekScalingRotaryEmbedding": (
        _rope({"rope_type": "deepseek_yarn", "factor": 4.0, "mscale": 1.0,
               "mscale_all_dim": 1.0, "original_max_position_embeddings": 128}, neox=False),
        _rope_inputs, {"npu_mrope"}),
    "MRotaryEmbedding": (_rope({"rope_type": "default", "mrope_section": [8, 12, 12]}),
                         _rope_inputs, {"npu_mrope"}),
    "SiluAndMul": (_silu, lambda _: (torch.randn(T, 2 * 48),), {"npu_swiglu"}),
    "GemmaRMSNorm": (_gemma, lambda _: (torch.randn(T, 96), torch.randn(T, 96)),
                     {"npu_add_rms_norm"}),
}
ROWS = {row.name: row for row in ASCEND_CUSTOM_OPS}
#: The MoE quant method is not a layer with a native forward: its row is tested in a real vLLM
#: MoE block (test_moe.py::test_real_vllm_block_runs_the_ascend_op_eager_and_compiled).
ROWS_TESTED_ELSEWHERE = {"UnquantizedFusedMoEMethod"}


@pytest.fixture
def vllm_context(ascend_cpu_platform: Any) -> Iterator[Callable[..., Any]]:
    """Registers the table (as the platform does) and enters a VllmConfig with custom ops."""
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm_ascend.engine.registry import published_ascend_config as current_ascend_config
    from vllm_ascend.process import compat_adjustments

    compat_adjustments.apply_compat_adjustments("cpu", config=current_ascend_config)

    def enter(custom_ops: list[str] | None = None) -> Any:
        config = VllmConfig(compilation_config=CompilationConfig(
            custom_ops=custom_ops or ["all"]))
        return set_current_vllm_config(config)

    yield enter


def test_every_row_has_a_case_and_a_vllm_base() -> None:
    assert set(ROW_CASES) | ROWS_TESTED_ELSEWHERE == set(ROWS)
    assert not set(ROW_CASES) & ROWS_TESTED_ELSEWHERE
    for row in ASCEND_CUSTOM_OPS:
        assert row.replaced.__name__ == row.name and row.replaced.__module__.startswith("vllm.")
        assert all(hasattr(torch.ops.ascend, op) for op in row.ascend_ops)


@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_row_runs_ascend_ops_and_equals_vllm_native(name: str, vllm_context: Any) -> None:
    row: CustomOpRow = ROWS[name]
    build, inputs, _ = ROW_CASES[name]
    with vllm_context():
        layer = build()
        assert type(layer) is row.replacement
        args = inputs(layer)
        with AscendOpCounter() as counter:
            got = layer(*(a.clone() for a in args))  # vLLM's dispatch: forward_cpu here
        native = layer.forward_native(*(a.clone() for a in args))
    called = {op for op, n in counter.counts.items() if n}
    assert called and called <= set(row.ascend_ops), counter.counts
    got_t = got if isinstance(got, tuple) else (got,)
    native_t = native if isinstance(native, tuple) else (native,)
    assert len(got_t) == len(native_t)
    for a, b in zip(got_t, native_t, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_row_reaches_the_npu_kernels_on_the_npu_path(name: str, vllm_context: Any,
                                                     npu_kernels_on_cpu: Any) -> None:
    build, inputs, kernels = ROW_CASES[name]
    with vllm_context():
        layer = build()
        layer.forward_oot(*inputs(layer))
    assert set(npu_kernels_on_cpu.counts) == kernels, npu_kernels_on_cpu.counts


def test_native_directives_bring_back_vllm_code(vllm_context: Any) -> None:
    directives = native_directives()
    assert directives == [f"-{row.name}" for row in ASCEND_CUSTOM_OPS]
    with vllm_context(["all", *directives]):
        layers = {name: build() for name, (build, _, _) in ROW_CASES.items()}
        assert not any(type(layer).enabled() for layer in layers.values())
        with AscendOpCounter() as counter:  # the ropes now run vLLM's forward_native
            for name, layer in layers.items():
                if "Rotary" in name:
                    layer(*ROW_CASES[name][1](layer))
    assert not counter.counts


def test_all_custom_ops_keeps_user_directives() -> None:
    assert all_custom_ops(None) == ["all"]
    assert all_custom_ops(["none"]) == ["all"]
    assert all_custom_ops(["none", "-SiluAndMul", "+rms_norm", "-SiluAndMul", "-", "x"]) == [
        "all", "-SiluAndMul", "+rms_norm"]


def test_a_replacement_must_subclass_what_it_replaces() -> None:
    row = CustomOpRow("NotAVllmOp", dict, ("silu_and_mul",), "nothing")
    with pytest.raises(TypeError, match="must subclass vLLM's NotAVllmOp"):
        register_ascend_custom_ops([row])

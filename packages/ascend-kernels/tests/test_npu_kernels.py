"""``ascend_kernels.ops.npu_kernels``: each op's declared NPU kernels, both ways.

Every declared kernel has an entry point in the torch-npu wheel record
(``torch_npu_double/torch_npu-<version>.json``), and every NPU adapter, run against the fake
torch_npu of ``torch_npu_double/seam`` on inputs its kernels take, touches exactly the torch_npu
attributes its op declares (the graph capture of ``paged_attention`` likewise)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ascend_kernels.capability import SOCS
from ascend_kernels.fia_graph import launch_fia_task, new_fia_task
from ascend_kernels.ops import SPECS
from ascend_kernels.ops.npu_kernels import NPU_SUPPORT
from torch_npu_double.seam import FakeTorchNpu

from .conftest import valid_arguments

BF16 = torch.bfloat16


class _Touched:
    """Stands in for torch_npu (or one of its callables), recording every attribute path an
    adapter reads from it (``"npu_fused_infer_attention_score.out"`` for an overload)."""

    def __init__(self, target: Any, touched: list[str], prefix: str = "") -> None:
        self._target, self._touched, self._prefix = target, touched, prefix

    def __getattr__(self, name: str) -> Any:
        path = f"{self._prefix}{name}"
        self._touched.append(path)
        return _Touched(getattr(self._target, name), self._touched, f"{path}.")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target(*args, **kwargs)


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(BF16)


def _kernel_arguments(op: str) -> dict[str, Any]:
    """bfloat16 arguments every adapter sends to its kernels (not to its reference): whole-head
    rope of 64 (npu_mrope's rule), FIA's block size of 16, an int8 zero point."""
    a = valid_arguments(op, BF16)
    pos = torch.tensor([0, 3, 1, 7, 2])
    rope = {"cos_sin_cache": _rand(8, 64), "head_size": 64, "rotary_dim": 64}
    if "offset" in a:  # a zero point the kernel takes as it is
        a["offset"] = torch.tensor([1], dtype=torch.int8)
    if op == "rotary_embedding":
        a.update(rope, positions=pos, q=_rand(5, 2 * 64), k=_rand(5, 64))
    elif op == "split_qkv_rmsnorm_rope":
        a.update(rope, positions=pos, qkv=_rand(5, 4 * 64), q_size=128, kv_size=64,
                 q_weight=_rand(64), k_weight=_rand(64), q_bias=_rand(64), k_bias=_rand(64))
    elif op == "mrotary_embedding":
        a.update(rope, positions=torch.stack([pos, pos.flip(0), pos.roll(1)]),
                 q=_rand(5, 2 * 64), k=_rand(5, 64), mrope_section=[16, 8, 8])
    elif op == "paged_attention":
        a.update(key_cache=_rand(6, 16, 2, 16), value_cache=_rand(6, 16, 2, 16))
    elif op == "reshape_and_cache":
        a.update(slot_mapping=torch.tensor([3, 20, 7]))
    return a


def _on_torch_npu(op: str, *, captured: bool = False) -> list[str]:
    support = NPU_SUPPORT[op]
    kernels = support.captured if captured else support.kernels
    return sorted(k.name for k in kernels if k.on_torch_npu)


ADAPTED = [name for name, spec in SPECS.items() if spec.npu is not None]


def test_ops_with_an_adapter_are_the_ops_with_kernels() -> None:
    assert set(NPU_SUPPORT) == set(SPECS)
    with_kernels = [op for op, support in NPU_SUPPORT.items() if support.kernels]
    assert with_kernels == ADAPTED


def test_every_declaration_names_known_socs_and_dtypes() -> None:
    for support in NPU_SUPPORT.values():
        assert support.socs and support.socs <= set(SOCS) - {"cpu"}
        assert support.dtypes and all(isinstance(getattr(torch, d), torch.dtype)
                                      for d in support.dtypes)


def test_every_declared_kernel_has_a_recorded_entry_point(fake_npu: FakeTorchNpu) -> None:
    record = fake_npu.record
    recorded = {*record["ops"], *record["kernel_schemas"], *record["python_apis"]}
    for op, support in NPU_SUPPORT.items():
        for kernel in support.all_kernels:
            if kernel.on_torch_npu:
                assert kernel.name in recorded, (op, kernel.name)
            else:  # torch's own op, dispatched to the NPU
                assert hasattr(torch.ops.aten, kernel.name.removeprefix("aten.")), kernel.name
            assert kernel.aclnn and record["aclnn"][kernel.name] == list(kernel.aclnn)


def test_no_declared_kernel_is_an_atb_op(fake_npu: FakeTorchNpu) -> None:
    # the doctor's NNAL finding says the plugin's kernels do not call ATB
    atb = {op for op, entry in fake_npu.record["ops"].items() if entry["library"] == "atb"}
    assert atb == {"_npu_rotary_embedding"}  # the record still knows ATB rope
    declared = {k.name for support in NPU_SUPPORT.values() for k in support.all_kernels}
    assert not declared & atb


@pytest.mark.parametrize("op", ADAPTED)
def test_each_adapter_calls_exactly_its_declared_kernels(fake_npu: FakeTorchNpu,
                                                         op: str) -> None:
    touched: list[str] = []
    SPECS[op].checked_npu(_Touched(fake_npu, touched))(**_kernel_arguments(op))  # type: ignore[arg-type]
    assert sorted(set(touched)) == _on_torch_npu(op)


def test_the_captured_attention_calls_exactly_its_declared_kernels() -> None:
    def get_max_workspace(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.empty(64, dtype=query.dtype)

    class Fia:  # the .out overload as torch_npu exposes it: an attribute of the kernel
        @staticmethod
        def out(*args: Any, **kwargs: Any) -> None:
            return None

    class Kernels:
        npu_fused_infer_attention_score = Fia
        _npu_fused_infer_attention_score_get_max_workspace = staticmethod(get_max_workspace)

    touched: list[str] = []
    npu = _Touched(Kernels, touched)
    query = _rand(4, 4, 16)
    cache = torch.zeros(3, 128, 2, 16, dtype=BF16)
    task = new_fia_task(npu, query, cache, cache.clone(),  # type: ignore[arg-type]
                        torch.zeros(2, 2, dtype=torch.int32), torch.empty_like(query),
                        [2, 4], [5, 3], 0.25)
    launch_fia_task(npu, task, [2, 4], [5, 3])  # type: ignore[arg-type]
    # the .out overload is reached through its kernel's attribute
    assert sorted(set(touched) - {"npu_fused_infer_attention_score"}) == \
        _on_torch_npu("paged_attention", captured=True)

"""Arguments of the fusion passes and the manager, each rule at its boundary."""

from __future__ import annotations

import math

import pytest
import torch
from ascend_graph import PASS_NAMES, GraphFusionPassManager
from ascend_graph.capability import supports
from ascend_graph.passes.fusion_passes import NormQuantPass, as_dtype


@pytest.mark.parametrize("eps", [math.ulp(0.0), 1e-6, math.nextafter(1.0, 0.0)])
def test_eps_just_inside_zero_to_one_is_accepted(eps: float) -> None:
    assert NormQuantPass(eps_values=[eps], dtypes=["bfloat16"]).settings()["patterns"]


@pytest.mark.parametrize("eps", [[0.0], [1.0], [1.5], [1e-6, 1.0], []])
def test_eps_at_or_outside_zero_and_one_is_refused_by_name(eps: list[float]) -> None:
    with pytest.raises(ValueError) as exc:
        NormQuantPass(eps_values=eps)
    assert str(exc.value) == f"norm eps values must be in (0, 1), got {eps!r}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("bfloat16", torch.bfloat16), ("torch.float16", torch.float16),
     (torch.float32, torch.float32), ("torch.bfloat16", torch.bfloat16)],
)
def test_dtype_names_with_or_without_the_torch_prefix(value: object, expected: torch.dtype
                                                      ) -> None:
    assert as_dtype(value) is expected


@pytest.mark.parametrize("value", ["int8", "torch.int32", "no_such_dtype", "bool", "Tensor"])
def test_a_name_that_is_not_a_floating_dtype_is_refused_by_name(value: str) -> None:
    with pytest.raises(ValueError) as exc:
        as_dtype(value)
    assert str(exc.value) == f"dtype {value!r} is not a floating torch dtype (e.g. 'bfloat16')"


def _mx(patterns: list[str]) -> list[str]:
    return [p for p in patterns if "MxQuant" in p]


def test_mx_patterns_follow_the_kernels_dtype_support() -> None:
    # A5's MX kernels take bf16/fp16 but not float32 (ascend_kernels' capability table).
    assert supports("rms_norm_dynamic_mx_quant", dtype=torch.float32, soc="A5") is False
    assert supports("rms_norm_dynamic_mx_quant", soc="A5") is True
    assert _mx(NormQuantPass(dtypes=["float32"], soc="A5").settings()["patterns"]) == []
    bf16 = _mx(NormQuantPass(dtypes=["bfloat16"], soc="A5").settings()["patterns"])
    assert len(bf16) == 2 * 2  # add+norm and norm alone, for each default eps
    assert _mx(NormQuantPass(dtypes=["bfloat16"], soc="A2").settings()["patterns"]) == []


def test_capability_default_soc_is_the_host_cpu() -> None:
    for op in ("rms_norm_dynamic_mx_quant", "add_rms_norm_quant", "split_qkv_rmsnorm_rope"):
        for dtype in (torch.float32, torch.bfloat16):
            assert supports(op, dtype=dtype) is supports(op, dtype=dtype, soc="cpu")
    assert supports("rms_norm_dynamic_mx_quant", dtype=torch.float32) is True


@pytest.mark.parametrize("switch", ["fuse_qknorm_rope", "fuse_muls_add", "w4a4",
                                    "sequence_parallel", "fuse_norm_quant"])
def test_a_switch_that_is_not_a_bool_is_named(switch: str) -> None:
    with pytest.raises(ValueError) as exc:
        GraphFusionPassManager(**{switch: "yes"})
    assert str(exc.value) == f"{switch} must be true or false, got 'yes'"


def test_last_counts_are_zero_for_every_pass_before_the_first_run() -> None:
    manager = GraphFusionPassManager()
    assert manager.last_counts == {name: 0 for name in PASS_NAMES}
    assert all(type(v) is int for v in manager.last_counts.values())


@pytest.mark.parametrize("soc", ["A2", "A3", "A5", "310P", "cpu"])
def test_every_pattern_pass_of_the_manager_gets_its_soc(soc: str) -> None:
    manager = GraphFusionPassManager(soc=soc, dtypes=["float16"])
    socs = {p.name: getattr(p, "soc", None) for p in manager.passes}
    assert socs == {"noop_elimination": None, "norm_quant": soc, "qknorm_rope": soc,
                    "muls_add": soc}

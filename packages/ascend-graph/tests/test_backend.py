"""make_backend: its config keys and the compiled-graph counter."""

from __future__ import annotations

import pytest
import torch
from ascend_graph import make_backend
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx


def _scaled_add(scale: float):  # type: ignore[no-untyped-def]
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * scale + y

    return fn


def _xy(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(4, 8, generator=gen).to(dtype), torch.randn(4, 8, generator=gen).to(dtype)


def _targets(gm: fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_unknown_keys_are_listed_comma_separated_with_every_allowed_key() -> None:
    with pytest.raises(ValueError) as info:
        make_backend({"zz": 1, "aa": 2, "soc": "cpu"})
    assert str(info.value) == (
        "unknown make_backend config key(s) 'aa', 'zz'; allowed: fuse_norm_quant, "
        "fuse_qknorm_rope, fuse_muls_add, fuse_kv_cache_attention, muls_add_scale, backend, "
        "soc, w4a4, qknorm_shapes, norm_eps, attention_ops"
    )


def test_compiled_graphs_counts_each_graph_handed_to_the_backend() -> None:
    backend = make_backend()
    assert backend.compiled_graphs == 0
    x, y = _xy()
    want = x * 2.0 + y
    for expected in (1, 2, 3):
        gm = fx.symbolic_trace(lambda a, b: (_scaled_add(2.0)(a, b),))
        fn = backend(gm, [x, y])
        assert backend.compiled_graphs == expected
        (out,) = fn(x, y)
        torch.testing.assert_close(out, want)


@pytest.mark.parametrize(("w4a4", "has_norm_quant"), [(True, False), (False, True)])
def test_w4a4_key_reaches_the_manager(w4a4: bool, has_norm_quant: bool) -> None:
    backend = make_backend({"w4a4": w4a4})
    assert backend.manager.w4a4 is w4a4
    assert ("norm_quant" in backend.manager.enabled) is has_norm_quant


def test_muls_add_scale_key_restricts_the_fused_scale() -> None:
    # the key travels either through make_backend's own kwargs or the switches mapping
    for scale, fused in ((2.5, 1), (3.0, 0)):
        backend = make_backend({"muls_add_scale": 2.5})
        gm = make_fx(_scaled_add(scale))(*_xy())
        assert backend.manager.run(gm)["muls_add"] == fused


def test_norm_eps_key_registers_exactly_those_eps(models, compile_module, close) -> None:
    module = models["qknorm"](eps=1e-3)
    gen = torch.Generator().manual_seed(4)
    inputs = (torch.tensor([0, 5, 9, 2]), torch.randn(4, 128, generator=gen))
    fused = compile_module(module, inputs, config={"norm_eps": [1e-3]})
    assert fused.report["qknorm_rope"] == 1
    assert fused.op_counts()["ascend.split_qkv_rmsnorm_rope"] == 1
    close(fused.outputs, fused.reference, torch.float32)
    # the defaults (1e-6, 1e-5) do not cover eps 1e-3: the graph stays unfused
    default = compile_module(module, inputs)
    assert default.report["qknorm_rope"] == 0
    assert default.op_counts()["ascend.split_qkv_rmsnorm_rope"] == 0









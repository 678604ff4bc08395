"""torch_npu_double.seam: the fake torch_npu rejects what the real one rejects.

Expected values come from the record of the real wheel: the output rules are checked against
the wheel's own meta functions (their recorded source, executed on meta tensors), the
dispatcher's checks against the real schema strings, the APIs against recorded signatures.
"""

from __future__ import annotations

import math
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_npu_double.seam import ATB_MISSING, ContractViolation, FakeTorchNpu, install, load_record
from torch_npu_double.seam.fixtures import fake_torch_npu  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[3]
RECORD = load_record()
BF16 = torch.bfloat16
E4M3_ID = 24  # what the dispatcher passes for dst_type=torch.float8_e4m3fn (an int argument)


def _meta_function(op: str) -> Any:
    """The wheel's meta function of ``op``, executed from its recorded source."""
    enum = {int(k): getattr(torch, v) for k, v in RECORD["dtype_enum"].items()}
    scope: dict[str, Any] = {
        "torch": torch, "math": math, "TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP": enum,
        "impl": lambda lib, name: (lambda fn: fn), "m": None,
        "ops_error": lambda code: "", "ErrCode": types.SimpleNamespace(PARAM=1, NOT_SUPPORT=2),
        "torch_npu": types.SimpleNamespace(float8_e5m2=291, float8_e4m3fn=292, int4=285),
    }  # fmt: skip
    source = "\n".join(RECORD["ops"][op]["meta_source"])
    exec(compile(source, f"<meta {op}>", "exec"), scope)
    names = re.findall(r"^def (\w+)", source, re.M)  # helpers first, the meta function last
    assert names
    return scope[names[-1]]


def _t(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# op -> (args, kwargs) valid for the real kernel, several shapes per op.
CASES: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "npu_rms_norm": [((_t(3, 70), _t(70)), {"epsilon": 1e-5}),
                     ((_t(2, 3, 16), _t(3, 16)), {})],
    "npu_add_rms_norm": [((_t(3, 70), _t(3, 70), _t(70)), {"epsilon": 1e-5})],
    "npu_quantize": [((_t(2, 8), torch.ones(8), torch.zeros(8, dtype=torch.int8), 12, -1, True),
                      {}),
                     ((_t(2, 8), torch.ones(8), None, 13), {})],
    "npu_dynamic_quant": [((_t(4, 2, 9),), {})],
    "npu_add_rms_norm_quant": [((_t(3, 8), _t(3, 8), _t(8), torch.ones(8),
                                 torch.zeros(8, dtype=torch.int32)), {"epsilon": 1e-6})],
    "npu_add_rms_norm_dynamic_quant": [
        ((_t(3, 8), _t(3, 8), _t(8)), {"output_mask": [True, False]}),
        ((_t(3, 8), _t(3, 8), _t(8)), {"output_mask": [True, True]}),
        ((_t(3, 8), _t(3, 8), _t(8)), {}),
        ((_t(3, 8), _t(3, 8), _t(8)), {"smooth_scale1": _t(8), "smooth_scale2": _t(8)}),
    ],
    "npu_dynamic_mx_quant": [((_t(3, 70),), {"dst_type": E4M3_ID}),
                             ((_t(2, 5, 64),), {"dst_type": 291}),
                             ((_t(2, 64),), {})],
    "npu_add_rms_norm_dynamic_mx_quant": [((_t(2, 70), _t(2, 70), _t(70)),
                                           {"dst_type": E4M3_ID})],
    "npu_rms_norm_dynamic_mx_quant": [((_t(2, 96), _t(96)), {"dst_type": 292})],
    "npu_swiglu": [((_t(3, 8),), {}), ((_t(6, 4),), {"dim": 0})],
    "npu_mrope": [((torch.arange(4), _t(4, 64), _t(4, 32), _t(16, 32), 32),
                   {"mrope_section": [0, 0, 0]})],
    # TND paged attention as ascend::paged_attention calls it; with and without the lse.
    "npu_fused_infer_attention_score": [
        ((_t(5, 4, 16), _t(3, 16, 32), _t(3, 16, 32)),
         {"atten_mask": torch.ones(2048, 2048, dtype=torch.int8).triu(1),
          "block_table": torch.zeros(2, 2, dtype=torch.int32), "input_layout": "TND",
          "block_size": 16, "actual_seq_lengths": [3, 5], "actual_seq_lengths_kv": [3, 20],
          "num_key_value_heads": 2, "num_heads": 4, "scale": 0.25, "sparse_mode": 3}),
        ((_t(5, 4, 16), _t(3, 16, 32), _t(3, 16, 32)),
         {"block_table": torch.zeros(2, 2, dtype=torch.int32), "input_layout": "TND",
          "block_size": 16, "actual_seq_lengths": [3, 5], "actual_seq_lengths_kv": [3, 20],
          "num_key_value_heads": 2, "num_heads": 4, "softmax_lse_flag": True}),
    ],
    "npu_scatter_pa_kv_cache": [
        ((_t(3, 2, 16), _t(3, 2, 16), _t(4, 16, 2, 16), _t(4, 16, 2, 16),
          torch.tensor([0, 17, 40], dtype=torch.int32)), {"cache_mode": "Norm"}),
    ],
}


@pytest.mark.parametrize(("op", "case"), [(op, i) for op in CASES for i in range(len(CASES[op]))])
def test_fake_kernel_outputs_follow_the_wheels_meta_function(
    fake_torch_npu: FakeTorchNpu, op: str, case: int  # noqa: F811
) -> None:
    args, kwargs = CASES[op][case]
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    meta_kwargs = {k: v.to("meta") if isinstance(v, torch.Tensor) else v
                   for k, v in kwargs.items()}
    want = _meta_function(op)(*meta_args, **meta_kwargs)
    got = getattr(fake_torch_npu, op)(*args, **kwargs)
    want, got = (w if isinstance(w, tuple) else () if w is None else (w,) for w in (want, got))
    assert [(g.dtype, tuple(g.shape)) for g in got] == [(w.dtype, tuple(w.shape)) for w in want]


def test_every_recorded_op_but_atb_has_a_case() -> None:
    assert set(CASES) | {"npu_format_cast", "_npu_rotary_embedding"} == set(RECORD["ops"])


def test_every_torch_npu_op_the_packages_call_is_recorded() -> None:
    called = set()
    for path in REPO.glob("packages/*/src/**/*.py"):
        called |= set(re.findall(r"\bnpu\.(_?npu_\w+)\(", path.read_text(encoding="utf-8")))
    # ops with an output rule, or kernels recorded by schema alone (no meta function in the
    # wheel, e.g. _npu_fused_infer_attention_score_get_max_workspace)
    recorded = set(RECORD["ops"]) | set(RECORD["kernel_schemas"])
    assert called and called <= recorded, called - recorded


def test_mx_scales_are_uint8_and_the_fused_op_returns_four(fake_torch_npu: FakeTorchNpu) -> None:  # noqa: F811
    out = fake_torch_npu.npu_add_rms_norm_dynamic_mx_quant(_t(2, 70), _t(2, 70), _t(70),
                                                           dst_type=torch.float8_e4m3fn)
    assert len(out) == 4
    assert out[2].dtype == torch.uint8 and out[2].shape == (2, 2, 2)


def test_the_dispatcher_binds_calls_to_the_real_schema(fake_torch_npu: FakeTorchNpu) -> None:  # noqa: F811
    x, g = _t(2, 8), _t(8)
    with pytest.raises(RuntimeError, match="expected at most 3 argument"):
        fake_torch_npu.npu_rms_norm(x, g, 1e-6, 1.0)  # one too many
    with pytest.raises(RuntimeError, match="positional argument"):
        fake_torch_npu.npu_dynamic_mx_quant(x, -1)  # axis is keyword-only
    with pytest.raises(RuntimeError, match="Unknown keyword argument 'bias'"):
        fake_torch_npu.npu_add_rms_norm_dynamic_quant(x, x, g, bias=g)
    with pytest.raises(RuntimeError, match="missing value for argument 'input'"):
        fake_torch_npu.npu_rms_norm(x=x, gamma=g)  # the real first parameter is `input`
    with pytest.raises(RuntimeError, match=r"expected .*Tensor|Expected a value of type"):
        fake_torch_npu.npu_swiglu([1.0, 2.0])
    assert fake_torch_npu.calls == []
    fake_torch_npu.npu_rms_norm(input=x, gamma=g)
    assert fake_torch_npu.kernels.names() == ["npu_rms_norm"]


@pytest.mark.parametrize(
    ("op", "args", "kwargs", "message"),
    [
        ("npu_dynamic_quant", (_t(2, 8, dtype=torch.float32),), {}, "input has dtype"),
        ("npu_dynamic_quant", (_t(8),), {}, "input has 1 dims; allowed: 2-8"),
        ("npu_rms_norm", (_t(8), _t(8)), {}, "input has 1 dims"),
        ("npu_rms_norm", (_t(2, 8), _t(8, dtype=torch.float16)), {}, "gamma has dtype"),
        ("npu_quantize", (_t(2, 8), torch.ones(8, dtype=torch.float16), None, 12), {},
         "scales has dtype torch.float16"),
        ("npu_quantize", (_t(2, 8), torch.ones(8), torch.zeros(8), 12), {},
         "zero_points has dtype torch.float32"),
        ("npu_add_rms_norm_quant", (_t(2, 8), _t(2, 8), _t(8), torch.ones(1), None), {},
         r"scales1 has shape \[1\]; it must be gamma's \[8\]"),
        ("npu_add_rms_norm_quant",
         (_t(2, 8), _t(2, 8), _t(8), torch.ones(8), torch.zeros(8, dtype=torch.int8)), {},
         "zero_points1 has dtype torch.int8"),
        ("npu_add_rms_norm_quant", (_t(2, 8, dtype=torch.float32), _t(2, 8), _t(8),
                                    torch.ones(8), None), {}, "x1 has dtype torch.float32"),
        ("npu_add_rms_norm_dynamic_quant", (_t(8), _t(8), _t(8)), {}, "x1 has 1 dims"),
        ("npu_add_rms_norm_dynamic_quant", (_t(2, 8), _t(2, 8), _t(8)),
         {"output_mask": [False, False]}, "output_mask must switch on"),
        ("npu_dynamic_mx_quant", (_t(2, 31, dtype=torch.float32),), {},
         "dim -1 is 31; with torch.float32 it must be at least 32"),
        ("npu_mrope", (torch.arange(2), _t(2, 48), _t(2, 48), _t(8, 48), 48), {},
         "dim 1 is 48; with bfloat16 inputs it must be a multiple of 32"),
    ],
)
def test_documented_constraints_are_enforced(
    fake_torch_npu: FakeTorchNpu, op: str, args: tuple[Any, ...], kwargs: dict[str, Any],  # noqa: F811
    message: str,
) -> None:
    with pytest.raises(ContractViolation, match=message):
        getattr(fake_torch_npu, op)(*args, **kwargs)


def test_constraint_boundaries_accept_what_the_docs_allow(fake_torch_npu: FakeTorchNpu) -> None:  # noqa: F811
    f = fake_torch_npu
    f.npu_mrope(torch.arange(2), _t(2, 48, dtype=torch.float32), _t(2, 48, dtype=torch.float32),
                _t(8, 48, dtype=torch.float32), 48)  # 48 % 16 == 0 in float32
    f.npu_mrope(torch.arange(2), _t(2, 64), _t(2, 64), _t(8, 32), 64)
    f.npu_dynamic_quant(_t(1, 8, dtype=torch.float16))
    f.npu_dynamic_mx_quant(_t(2, 32, dtype=torch.float32))  # one whole block in float32
    f.npu_dynamic_mx_quant(_t(2, 31), dst_type=torch.float8_e4m3fn)  # bf16: no minimum
    f.npu_quantize(_t(2, 8, dtype=torch.float32), torch.ones(1, dtype=BF16),
                   torch.zeros(1, dtype=BF16), 12, -1, True)
    # div_mode=False documents other dtypes: the div_mode rules do not apply.
    f.npu_quantize(_t(2, 8), torch.ones(8, dtype=torch.float16), torch.zeros(8), 12, -1, False)
    f.npu_add_rms_norm_quant(_t(8), _t(8), _t(8), torch.ones(8, dtype=BF16),
                             torch.zeros(8, dtype=BF16))
    assert len(f.calls) == 8


def test_calls_record_the_arguments_as_passed_and_the_outputs(
    fake_torch_npu: FakeTorchNpu,  # noqa: F811
) -> None:
    x, g = _t(2, 8), _t(8)
    y, rstd = fake_torch_npu.npu_rms_norm(x, g, epsilon=0.5)
    call = fake_torch_npu.kernels.last("npu_rms_norm")
    assert call.args[0] is x and call.args[1] is g and call.kwargs == {"epsilon": 0.5}
    assert call.outputs[0] is y and call.outputs[1] is rstd
    assert torch.all(y == fake_torch_npu.kernels.marker("npu_rms_norm", 0))
    assert torch.all(rstd == fake_torch_npu.kernels.marker("npu_rms_norm", 1))
    with pytest.raises(LookupError, match="npu_swiglu was not called"):
        fake_torch_npu.kernels.last("npu_swiglu")


def test_in_place_atb_rope_fills_query_and_key_and_keeps_the_inputs(
    fake_torch_npu: FakeTorchNpu,  # noqa: F811
) -> None:
    q, k = _t(2, 32), _t(2, 32)
    q0 = q.clone()
    assert fake_torch_npu._npu_rotary_embedding(torch.arange(2), q, k, 32, _t(4, 32), True) is None
    call = fake_torch_npu.kernels.last("_npu_rotary_embedding")
    assert torch.equal(call.before["query"], q0)
    marker = fake_torch_npu.kernels.marker
    assert torch.all(q == marker("_npu_rotary_embedding", 0))
    assert torch.all(k == marker("_npu_rotary_embedding", 1))


def test_without_nnal_the_atb_op_raises_the_load_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, atb=False)
    try:
        import torch_npu

        assert isinstance(torch_npu.op_plugin.atb._atb_ops.NNAL_EX, OSError)
        with pytest.raises(OSError, match=re.escape(ATB_MISSING)):
            torch_npu._npu_rotary_embedding(torch.arange(1), _t(1, 32), _t(1, 32), 32,
                                            _t(1, 32), True)
        assert fake.calls == []
    finally:
        fake.close()


@pytest.mark.parametrize("fake_torch_npu", [{"soc_id": 256}, {"soc_id": 260}], indirect=True)
def test_soc_id_and_device_name_come_from_the_recorded_enum(
    fake_torch_npu: FakeTorchNpu,  # noqa: F811
) -> None:
    import torch_npu

    soc = torch_npu.npu.get_soc_version()
    names = {v: k for k, v in RECORD["soc_versions"].items()}
    assert soc == fake_torch_npu.npu.soc_id and torch.npu.get_device_name(0) == names[soc]
    assert names[256] == "Ascend910_9363" and names[260] == "Ascend950"


def test_python_apis_are_bound_to_the_recorded_signatures(
    fake_torch_npu: FakeTorchNpu,  # noqa: F811
) -> None:
    npu = torch.npu
    assert npu is fake_torch_npu.npu and sys.modules["torch_npu.npu"] is npu
    with pytest.raises(TypeError, match=r"get_device_name\(device_name=None\)"):
        npu.get_device_name(device=0)
    with pytest.raises(TypeError, match="set_device"):
        npu.set_device()
    with pytest.raises(TypeError, match=r"Stream.synchronize"):
        npu.current_stream().synchronize(True)
    npu.set_device(1)
    npu.reset_peak_memory_stats(1)
    assert npu.max_memory_allocated(device=1) == 0
    props = npu.get_device_properties(1)
    assert props.cube_core_num > 0 and not hasattr(props, "uuid")
    assert fake_torch_npu.npu.called("set_device") == [{"device": 1}]


def test_graph_capture_follows_the_real_graph_context(fake_torch_npu: FakeTorchNpu) -> None:  # noqa: F811
    npu = torch.npu
    graph, pool = npu.NPUGraph(), npu.graph_pool_handle()
    with npu.graph(graph, pool=pool):
        assert graph.capturing
    graph.replay()
    names = [name for name, _ in fake_torch_npu.npu.calls]
    assert names[2:] == ["graph", "synchronize", "empty_cache", "host_empty_cache",
                         "NPUGraph.capture_begin", "NPUGraph.capture_end", "NPUGraph.replay"]
    assert fake_torch_npu.npu.called("NPUGraph.capture_begin") == [
        {"pool": pool, "capture_error_mode": "global"}]
    with pytest.raises(TypeError, match="graph"):
        npu.graph(graph, pool, None, False, "global", "extra")
    assert graph.captures == 1 and graph.replays == 1


def test_graph_extensions_have_the_real_names_and_strict_configs(
    fake_torch_npu: FakeTorchNpu,  # noqa: F811
) -> None:
    import importlib

    ex, ta = importlib.import_module("npugraph_ex"), importlib.import_module("torchair")
    assert ex.__name__ == "torch_npu.dynamo.npugraph_ex"
    assert ta.__name__ == "torch_npu.dynamo.torchair"
    assert not hasattr(ex, "_NpuFxCompiler") and hasattr(ex.npu_fx_compiler, "_NpuFxCompiler")
    config = ex.CompilerConfig()
    config.force_eager = True
    with pytest.raises(ValueError, match="has no option 'forse_eager'"):
        config.forse_eager = True
    with pytest.raises(ValueError, match="mode must be one of"):
        config.mode = "reduce-overhead"
    helper = importlib.import_module(f"{ex.__name__}.configs.compiler_config")
    helper._process_kwargs_options(config, {"options": {"clone_input": False}})
    assert config.clone_input is False
    with pytest.raises(ValueError, match="no option 'bogus'"):
        helper._process_kwargs_options(config, {"options": {"bogus": 1}})
    ta_config = ta.CompilerConfig()
    ta_config.mode = "reduce-overhead"
    ta_config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    ta_config.experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range = [1]
    with pytest.raises(TypeError, match="get_npu_backend"):
        ex.get_npu_backend(config)  # keyword-only in the real one


def test_compiled_graph_has_get_code_not_code(fake_torch_npu: FakeTorchNpu) -> None:  # noqa: F811
    import npugraph_ex

    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    compiler = npugraph_ex.npu_fx_compiler._NpuFxCompiler(npugraph_ex.CompilerConfig())
    compiled = compiler._get_compiled_gm(gm, [torch.ones(2)])
    assert not hasattr(compiled, "code") and "def forward" in compiled.get_code()
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(TypeError):
        compiler._get_compiled_gm(gm)
    backend = npugraph_ex.get_npu_backend(compiler_config=npugraph_ex.CompilerConfig())
    assert torch.equal(backend(gm, [torch.ones(2)])(torch.ones(2)), torch.full((2,), 2.0))


def test_install_is_undone_by_monkeypatch() -> None:
    before = sys.modules.get("torch_npu"), getattr(torch, "npu", None)
    with pytest.MonkeyPatch.context() as mp:
        fake = install(mp)
        assert sys.modules["torch_npu"] is fake and sys.modules["npugraph_ex"] is not None
        fake.close()
    assert (sys.modules.get("torch_npu"), getattr(torch, "npu", None)) == before
    assert "npugraph_ex" not in sys.modules or before[0] is not None


def test_every_torch_npu_npu_api_the_packages_call_is_recorded() -> None:
    api = re.compile(r"(?:torch_npu\(\)\.npu|torch\.npu|\b_npu\(\)|\bnpu)\.(\w+)")
    called: set[str] = set()
    for package in ("vllm-ascend", "ascend-graph"):
        for path in REPO.glob(f"packages/{package}/src/**/*.py"):
            called |= set(api.findall(path.read_text(encoding="utf-8")))
    # `torch_npu().npu` itself, `platform.npu.NPUPlatform` (a module path), `npu.py` (a file).
    called -= {"npu", "py", "NPUPlatform"}
    assert {"get_soc_version", "graph", "NPUGraph", "current_stream"} <= called
    assert called <= set(RECORD["python_apis"]), called - set(RECORD["python_apis"])

"""``OpSpec``: every op's error contract (README "Error contract") at each rule's boundary, and
the ``_out`` helpers built from the specs.

Each bad input is tried on three paths: the reference kernels (CPU), the fake kernels under
``FakeTensorMode`` (what torch.compile runs) and the NPU adapters (through the recording fake
``torch_npu``). Checks that need tensor values (rope positions, LoRA indices, sequence
lengths) run in the reference only: elsewhere they would need a device sync.

Bounded, seeded fuzzing starts from valid arguments and replaces some of them with drawn
values: tensors of any shape (0-d, empty, wrong width), dtype (float64, ints, bool) or device
(meta), index tensors of wrong dtype or out-of-range values, ``eps`` including NaN, infinities,
zero and negatives, and negative or oversized integer sizes. The op must either return tensors
or raise ``ValueError`` / ``DeviceMismatchError``; anything else (an ``IndexError`` from deep
inside, a ``RuntimeError`` from torch) is a bug.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from ascend_kernels import (
    OP_NAMES,
    DeviceMismatchError,
)
from ascend_kernels.ops import spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .exact_messages import Message, exact_message_test, positional_args

A = torch.ops.ascend
NAN, INF = float("nan"), float("inf")
PATHS = ["reference", "fake", "symbolic", "npu", "out"]  # out: the public <op>_out helper
REFERENCE_ONLY = "reference-only"
SINGLE_TENSOR_OPS = ("dynamic_quant", "dynamic_mx_quant", "silu_and_mul")  # nothing to mix


def _t(*values: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


EPS_CASES = [0.0, -0.0, -1e-6, NAN, INF, -INF]

# (op, changed arguments, message regex, flag)
BAD: list[tuple[str, dict[str, Any], str, str]] = [
    *[("rms_norm", {"eps": e}, "eps must be finite and > 0", "") for e in EPS_CASES],
    ("rms_norm", {"x": torch.tensor(1.0)}, "x must have at least 1 dim", ""),
    ("rms_norm", {"x": torch.ones(5, 0), "weight": torch.ones(0)}, "non-empty last dim", ""),
    ("rms_norm", {"x": torch.ones(5, 70, dtype=torch.int32)}, "x must be float32", ""),
    ("rms_norm", {"x": torch.ones(5, 70, dtype=torch.float64)}, "x must be float32", ""),
    ("rms_norm", {"weight": torch.ones(69)}, r"weight must have shape \[70\]", ""),
    ("rms_norm", {"weight": torch.ones(1, 70)}, r"weight must have shape \[70\]", ""),
    ("rms_norm", {"weight": torch.ones(70, dtype=torch.int32)}, "weight must be float32", ""),
    ("add_rms_norm", {"residual": torch.ones(5, 71)}, "residual must match x", ""),
    ("add_rms_norm", {"residual": torch.ones(5, 70).bfloat16()}, "residual must match x", ""),
    ("add_rms_norm", {"bias": torch.ones(3)}, r"bias must have shape \[70\]", ""),
    ("add_rms_norm", {"eps": NAN}, "eps", ""),
    ("quantize", {"scale": torch.ones(3)}, "scale must hold 1 value", ""),
    ("quantize", {"offset": torch.ones(2)}, "offset must hold 1 value", ""),
    ("quantize", {"scale": _t(1)}, "scale must be float32", ""),
    ("quantize", {"offset": _t(True, dtype=torch.bool)}, "offset must be a floating or int", ""),
    ("quantize", {"x": torch.tensor(1.0)}, "x must have at least 1 dim", ""),
    ("dynamic_quant", {"x": torch.tensor(1.0)}, "x must have at least 1 dim", ""),
    ("dynamic_quant", {"x": torch.ones(3, 0)}, "non-empty last dim", ""),
    ("dynamic_quant", {"x": torch.ones(3, 4, dtype=torch.float64)}, "x must be float32", ""),
    ("add_rms_norm_quant", {"eps": -1.0}, "eps", ""),
    ("add_rms_norm_quant", {"scale": torch.ones(69)}, "scale must hold", ""),
    ("add_rms_norm_quant", {"residual": torch.ones(5, 71)}, "residual must match x", ""),
    ("add_rms_norm_quant", {"bias": torch.ones(1)}, r"bias must have shape \[70\]", ""),
    ("add_rms_norm_quant", {"bias": torch.ones(71)}, r"bias must have shape \[70\]", ""),
    ("add_rms_norm_dynamic_quant", {"eps": INF}, "eps", ""),
    ("add_rms_norm_dynamic_quant", {"residual": torch.ones(4, 70)}, "residual must match", ""),
    ("dynamic_mx_quant", {"x": torch.tensor(2.0)}, "x must have at least 1 dim", ""),
    ("dynamic_mx_quant", {"x": torch.ones(2, 0)}, "non-empty last dim", ""),
    ("dynamic_mx_quant", {"x": torch.ones(2, 3, dtype=torch.bool)}, "x must be float32", ""),
    ("add_rms_norm_dynamic_mx_quant", {"eps": NAN}, "eps", ""),
    ("rms_norm_dynamic_mx_quant", {"eps": 0.0}, "eps", ""),
    ("rms_norm_dynamic_mx_quant", {"weight": torch.ones(71)}, "weight must have shape", ""),
    ("rotary_embedding", {"positions": torch.zeros(5)}, "positions must be an int32 or int64",
     ""),
    ("rotary_embedding", {"positions": torch.zeros(5, dtype=torch.bool)}, "positions must be",
     ""),
    ("rotary_embedding", {"positions": _t(0, 3, 1, 8, 2)}, r"positions must lie in \[0, 8\)",
     REFERENCE_ONLY),
    ("rotary_embedding", {"positions": _t(0, -1, 1, 7, 2)}, r"positions must lie in \[0, 8\)",
     REFERENCE_ONLY),
    ("rotary_embedding", {"cos_sin_cache": torch.ones(0, 32)}, "cos_sin_cache must be", ""),
    ("rotary_embedding", {"cos_sin_cache": torch.ones(8, 30)}, "cos_sin_cache must be", ""),
    ("rotary_embedding", {"cos_sin_cache": torch.ones(8, 32, dtype=torch.int32)},
     "cos_sin_cache must be float32", ""),
    ("rotary_embedding", {"head_size": 0}, "head_size must be > 0", ""),
    ("rotary_embedding", {"head_size": -48}, "head_size must be > 0", ""),
    ("rotary_embedding", {"rotary_dim": 0}, "rotary_dim must be even", ""),
    ("rotary_embedding", {"rotary_dim": 31}, "rotary_dim must be even", ""),
    ("rotary_embedding", {"rotary_dim": 50}, "rotary_dim must be even", ""),
    ("rotary_embedding", {"q": torch.tensor(1.0)}, "q must be", ""),
    ("rotary_embedding", {"q": torch.ones(4, 192)}, "q must be", ""),
    ("rotary_embedding", {"q": torch.ones(5, 190)}, "q must be", ""),
    ("rotary_embedding", {"k": torch.ones(5, 2, 47)}, "k must be", ""),
    ("rotary_embedding", {"q": torch.ones(5, 192, dtype=torch.int32)}, "q must be float32", ""),
    *[("split_qkv_rmsnorm_rope", {"eps": e}, "eps must be finite", "") for e in EPS_CASES],
    ("split_qkv_rmsnorm_rope", {"q_size": -192}, "q_size must be > 0", ""),
    ("split_qkv_rmsnorm_rope", {"q_size": 0}, "q_size must be > 0", ""),
    ("split_qkv_rmsnorm_rope", {"kv_size": -96}, "kv_size must be > 0", ""),
    ("split_qkv_rmsnorm_rope", {"kv_size": 0}, "kv_size must be > 0", ""),
    ("split_qkv_rmsnorm_rope", {"q_size": 190}, "multiples of head_size", ""),
    ("split_qkv_rmsnorm_rope", {"qkv": torch.ones(5, 385)}, "qkv must be", ""),
    ("split_qkv_rmsnorm_rope", {"positions": _t(0, 1, 2, 3)}, "positions must hold T=5", ""),
    ("split_qkv_rmsnorm_rope", {"positions": _t(0, 3, 1, 8, 2)}, r"positions must lie in",
     REFERENCE_ONLY),
    ("split_qkv_rmsnorm_rope", {"cos_sin_cache": torch.ones(0, 32)}, "cos_sin_cache", ""),
    ("split_qkv_rmsnorm_rope", {"q_weight": torch.ones(47)}, "q_weight must have shape", ""),
    ("split_qkv_rmsnorm_rope", {"k_bias": torch.ones(47)}, "k_bias must have shape", ""),
    ("split_qkv_rmsnorm_rope", {"q_bias": torch.ones(49)}, "q_bias must have shape", ""),
    ("muls_add", {"y": torch.ones(5, 71)}, "y must match x", ""),
    ("muls_add", {"y": torch.ones(5, 70).half()}, "y must match x", ""),
    ("muls_add", {"x": torch.ones(5, 70, dtype=torch.int64)}, "x must be float32", ""),
    ("bgmv_expand", {"indices": torch.zeros(5)}, "indices must be an int32 or int64", ""),
    ("bgmv_expand", {"indices": torch.zeros(5, dtype=torch.bool)}, "indices must be an int32",
     ""),
    ("bgmv_expand", {"indices": _t(0, 1, -1, 3, 0)}, "indices must be < num_loras=3",
     REFERENCE_ONLY),
    ("bgmv_expand", {"indices": _t(0, 1, -1, 2)}, r"indices must be \[T=5\]", ""),
    ("bgmv_expand", {"slice_offset": -1}, r"slice_offset \(-1\)", ""),
    ("bgmv_expand", {"slice_size": -16}, r"slice_size \(-16\)", ""),
    ("bgmv_expand", {"slice_offset": 25}, "within y's 40 columns", ""),
    ("bgmv_expand", {"weight": torch.ones(3, 15, 8)}, "weight must be", ""),
    ("bgmv_expand", {"x": torch.ones(8)}, "x must be 2-D", ""),
    ("bgmv_expand", {"y": torch.ones(5, 40, dtype=torch.int32)}, "y must be float32", ""),
    ("sgmv_expand", {"lora_indices": torch.zeros(2)}, "lora_indices must be an int32", ""),
    ("sgmv_expand", {"seq_len": torch.ones(2)}, "seq_len must be an int32", ""),
    ("sgmv_expand", {"seq_len": _t(-1, 6)}, "seq_len must be >= 0", REFERENCE_ONLY),
    ("sgmv_expand", {"seq_len": _t(2, 2)}, "sum to the token count 5", REFERENCE_ONLY),
    ("sgmv_expand", {"lora_indices": _t(3, 0)}, "lora_indices must be < num_loras=3",
     REFERENCE_ONLY),
    ("sgmv_expand", {"lora_indices": _t(2)}, "equal length", ""),
    ("paged_attention", {"query": torch.ones(5, 3, 16)}, r"num_heads \(3\) must be a multiple",
     ""),
    ("paged_attention", {"query": torch.ones(5, 4, 16, dtype=torch.int32)},
     "query must be float32", ""),
    ("paged_attention", {"block_table": torch.zeros(2, 2)}, "block_table must be an int32", ""),
    ("paged_attention", {"seq_lens": [3, 9]}, "sequence 1 needs 3 blocks of 4", ""),
    ("paged_attention", {"seq_lens": [2, 6]}, "sequence 0 has 3 query tokens", ""),
    ("paged_attention", {"query_ends": [3, 6], "seq_lens": [3, 6]}, "query_ends.-1. = 6 is past",
     ""),
    ("paged_attention", {"scale": INF}, "scale must be finite", ""),
    ("paged_attention", {"block_table": _t(2, 0, 6, 1, dtype=torch.int32).view(2, 2)},
     r"block_table\[1, 0\] = 6 is not a block", REFERENCE_ONLY),
    ("reshape_and_cache", {"slot_mapping": _t(3, 24)}, "slot_mapping.1. = 24 is past",
     REFERENCE_ONLY),
    ("reshape_and_cache", {"slot_mapping": torch.zeros(6, dtype=torch.int64)},
     "slot_mapping must be 1-D with at most T=5", ""),
    ("reshape_and_cache", {"slot_mapping": torch.zeros(3)}, "slot_mapping must be an int32", ""),
    ("reshape_and_cache", {"key_cache": torch.ones(6, 4, 2, 8)}, "value_cache must match", ""),
]

# Just inside each boundary: these must run.
GOOD: list[tuple[str, dict[str, Any]]] = [
    ("rms_norm", {"eps": 1e-30}),
    ("rms_norm", {"eps": 1e30}),
    ("rms_norm", {"x": torch.ones(0, 70)}),
    ("rms_norm", {"x": torch.ones(70)}),
    ("dynamic_quant", {"x": torch.ones(3, 1)}),
    ("dynamic_mx_quant", {"x": torch.ones(1)}),
    ("quantize", {"scale": torch.ones(70), "offset": torch.ones(70, dtype=torch.int8)}),
    ("rotary_embedding", {"positions": _t(0, 7, 7, 0, 1)}),
    ("rotary_embedding", {"positions": _t(0, 7, 7, 0, 1, dtype=torch.int32)}),
    ("rotary_embedding", {"rotary_dim": 48, "cos_sin_cache": torch.ones(8, 48)}),
    ("rotary_embedding", {"rotary_dim": 2, "cos_sin_cache": torch.ones(1, 2),
                          "positions": torch.zeros(5, dtype=torch.int64)}),
    ("split_qkv_rmsnorm_rope", {"positions": _t(7, 0, 7, 1, 6), "eps": 1e-30}),
    ("split_qkv_rmsnorm_rope", {"q_bias": None, "k_bias": None}),
    ("muls_add", {"x": torch.tensor(1.0), "y": torch.tensor(2.0)}),
    ("bgmv_expand", {"indices": _t(2, 2, -1, -5, 0), "slice_offset": 24}),
    ("bgmv_expand", {"slice_offset": 0, "slice_size": 0, "weight": torch.ones(3, 0, 8)}),
    ("bgmv_expand", {"weight": torch.ones(3, 1, 16, 8)}),
    ("sgmv_expand", {"seq_len": _t(0, 5)}),
    ("sgmv_expand", {"lora_indices": _t(-1, 2, dtype=torch.int32)}),
    ("paged_attention", {"seq_lens": [3, 8], "block_table": _t(2, -9, 5, 1,
                                                               dtype=torch.int32).view(2, 2)}),
    ("paged_attention", {"query_ends": [3, 5], "seq_lens": [3, 5]}),
    ("reshape_and_cache", {"slot_mapping": _t(23, -5, 0, dtype=torch.int32)}),
    ("reshape_and_cache", {"slot_mapping": torch.zeros(0, dtype=torch.int64)}),
]


def _call(op: str, args: dict[str, Any], path: str, request: pytest.FixtureRequest) -> Any:
    values = list(args.values())
    if path == "npu":
        request.getfixturevalue("fake_npu_on_cpu")
    if path == "out":
        return _call_out_variant(op, values, request)
    if path in ("fake", "symbolic"):
        shape_env = ShapeEnv() if path == "symbolic" else None
        with FakeTensorMode(shape_env=shape_env, static_shapes=path == "fake") as mode:
            fakes = [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in values]
            return getattr(A, op)(*fakes)
    return getattr(A, op)(*values)


def _call_out_variant(op: str, values: list[Any], request: pytest.FixtureRequest) -> Any:
    """``<op>_out`` into outputs shaped like the op's (for these arguments when they are
    valid, else for the valid ones); the op itself for ops without an ``_out`` helper."""
    from ascend_kernels.ops import spec

    op_spec = spec(op)
    if not op_spec.out_names:
        return getattr(A, op)(*values)
    try:
        like = getattr(A, op)(*values)
    except ValueError:
        like = getattr(A, op)(*request.getfixturevalue("valid_args")(op).values())
    like = like if isinstance(like, tuple) else (like,)
    outs = {name: torch.empty_like(t) for name, t in zip(op_spec.out_names, like, strict=True)}
    return op_spec.out(*values, **outs)


def _case_id(case: tuple[Any, ...]) -> str:
    op, changes = case[0], case[1]
    parts = []
    for name, value in changes.items():
        if isinstance(value, torch.Tensor):
            parts.append(f"{name}={str(value.dtype).removeprefix('torch.')}{list(value.shape)}")
        else:
            parts.append(f"{name}={value}")
    return f"{op}:{','.join(parts)}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", BAD, ids=_case_id)
def test_bad_input_raises_value_error_naming_the_argument(
    case: tuple[str, dict[str, Any], str, str],
    path: str,
    valid_args: Any,
    request: pytest.FixtureRequest,
) -> None:
    op, changes, message, flag = case
    args = {**valid_args(op), **changes}
    if flag == REFERENCE_ONLY and path not in ("reference", "out"):
        # Not checked without the values (no device sync): the call must not fail otherwise.
        if path != "npu":
            _call(op, args, path, request)
        return
    if path == "symbolic":
        # Sizes print as symbols (s0, s1...): match the text before the first size.
        message = re.split(r"\\\[|\d", message)[0]
    with pytest.raises(ValueError, match=message):
        _call(op, args, path, request)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", GOOD, ids=_case_id)
def test_inputs_at_the_boundary_are_accepted(
    case: tuple[str, dict[str, Any]], path: str, valid_args: Any, request: pytest.FixtureRequest
) -> None:
    op, changes = case
    args = {**valid_args(op), **changes}
    expected = getattr(A, op)(*args.values()) if path != "reference" else None
    got = _call(op, args, path, request)
    outs = _outputs(got)
    for out in outs:
        assert isinstance(out, torch.Tensor)
    if expected is not None:  # every path agrees on the output shapes and dtypes
        want = _outputs(expected)
        assert [(tuple(o.shape), o.dtype) for o in outs] == [
            (tuple(w.shape), w.dtype) for w in want
        ]


def _outputs(result: Any) -> tuple[Any, ...]:
    """An op's outputs as a tuple (none for ops that only write their arguments)."""
    return result if isinstance(result, tuple) else () if result is None else (result,)


def _tensor_arguments(op: str, valid_args: Any) -> list[str]:
    return [k for k, v in valid_args(op).items() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("op", [op for op in OP_NAMES if op not in SINGLE_TENSOR_OPS])
def test_one_tensor_on_another_device_is_a_device_error(op: str, valid_args: Any) -> None:
    for name in _tensor_arguments(op, valid_args):
        on_cpu = valid_args(op)
        one_meta = {**on_cpu, name: on_cpu[name].to("meta")}
        all_meta_but_one = {
            k: v.to("meta") if isinstance(v, torch.Tensor) and k != name else v
            for k, v in on_cpu.items()
        }
        for args in (one_meta, all_meta_but_one):
            with pytest.raises(DeviceMismatchError) as info:
                getattr(A, op)(*args.values())
            message = str(info.value)
            # The odd one out is named, with both devices.
            assert name in message and "meta" in message and "cpu" in message, message
    assert issubclass(DeviceMismatchError, RuntimeError)  # like torch's own device errors


@pytest.mark.parametrize("op", OP_NAMES)
def test_all_meta_arguments_give_meta_outputs_shaped_like_the_reference(
    op: str, valid_args: Any
) -> None:
    args = valid_args(op)
    want = getattr(A, op)(*args.values())
    meta = [v.to("meta") if isinstance(v, torch.Tensor) else v for v in args.values()]
    got = getattr(A, op)(*meta)
    want_t, got_t = _outputs(want), _outputs(got)
    assert [(o.device.type, tuple(o.shape), o.dtype) for o in got_t] == [
        ("meta", tuple(w.shape), w.dtype) for w in want_t
    ]


def test_out_helpers_reject_an_output_on_another_device() -> None:
    from ascend_kernels.ops import spec

    x = torch.randn(3, 8)
    with pytest.raises(DeviceMismatchError, match="out is on meta"):
        spec("rms_norm").out(x, torch.ones(8), 1e-6, out=torch.empty(3, 8, device="meta"))
    with pytest.raises(DeviceMismatchError, match="out is on meta"):
        spec("muls_add").out(x, x, 0.5, out=torch.empty(3, 8, device="meta"))


def test_eps_rule_is_the_documented_one() -> None:
    from ascend_kernels.validation import check_eps

    for ok in (1e-30, 1e-6, 0.1, 1e300, math.ulp(0.0)):
        check_eps(ok)
    for bad in EPS_CASES:
        with pytest.raises(ValueError, match=f"got {bad!r}"):
            check_eps(bad)


def _out_helper_ops() -> list[str]:
    from ascend_kernels.ops import spec

    return [op for op in OP_NAMES if spec(op).out_names]  # the LoRA ops have none


@pytest.mark.parametrize("op", _out_helper_ops())
def test_out_helpers_run_on_meta_tensors_without_touching_data(op: str, valid_args: Any) -> None:
    # The preallocated-output helpers keep every buffer on the arguments' device: on meta
    # (no data) they return their outputs, and a scratch buffer on another device would fail.
    from ascend_kernels.ops import spec

    out_fn, names = spec(op).out, spec(op).out_names
    args = valid_args(op)
    like = getattr(A, op)(*args.values())
    like = like if isinstance(like, tuple) else (like,)
    meta = [v.to("meta") if isinstance(v, torch.Tensor) else v for v in args.values()]
    outs = {n: torch.empty_like(t, device="meta") for n, t in zip(names, like,
                                                                  strict=True)}
    got = out_fn(*meta, **outs)
    got = got if isinstance(got, tuple) else (got,)
    assert [g is o for g, o in zip(got, outs.values(), strict=True)] == [True] * len(outs)


@pytest.mark.parametrize("op", _out_helper_ops())
def test_out_helpers_name_the_output_that_has_the_wrong_shape(op: str, valid_args: Any) -> None:
    from ascend_kernels.ops import spec

    out_fn, names = spec(op).out, spec(op).out_names
    args = valid_args(op)
    like = getattr(A, op)(*args.values())
    like = like if isinstance(like, tuple) else (like,)
    for wrong in names:
        outs = {n: torch.empty_like(t) for n, t in zip(names, like, strict=True)}
        outs[wrong] = torch.empty(*outs[wrong].shape, 3, dtype=outs[wrong].dtype)
        with pytest.raises(ValueError, match=rf"^{wrong} must be a contiguous "):
            out_fn(*args.values(), **outs)


def test_quantisation_parameters_on_another_device_than_x_are_a_device_error(
    valid_args: Any,
) -> None:
    # scale and offset together on one device, x, residual and weight on another.
    args = valid_args("add_rms_norm_quant")
    args = {**args, "scale": args["scale"].to("meta"), "offset": args["offset"].to("meta")}
    with pytest.raises(DeviceMismatchError, match=r"^scale is on meta but x is on cpu"):
        A.add_rms_norm_quant(*args.values())


@pytest.mark.parametrize("name", ["scale", "offset"])
def test_each_quantisation_parameter_alone_on_another_device_is_named_exactly(
    name: str, valid_args: Any
) -> None:
    args = valid_args("add_rms_norm_quant")
    args = {**args, name: args[name].to("meta")}
    with pytest.raises(DeviceMismatchError, match=rf"^{name} is on meta but x is on cpu;"):
        A.add_rms_norm_quant(*args.values())


def test_out_helpers_reject_a_wrong_preallocated_output() -> None:
    from ascend_kernels.ops import spec

    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        spec("rms_norm").out(x, torch.ones(64), 1e-6, out=torch.empty(64, 4).t())
    with pytest.raises(ValueError, match=r"scale_out must be a contiguous torch\.float32"):
        spec("dynamic_quant").out(
            x, out=torch.empty(4, 64, dtype=torch.int8), scale_out=torch.empty(4, 1)
        )
    with pytest.raises(ValueError, match=r"scale_out must be a contiguous torch\.float8_e8m0fnu"):
        spec("dynamic_mx_quant").out(
            x, out=torch.empty(4, 64, dtype=torch.float8_e4m3fn), scale_out=torch.empty(4, 2)
        )


I64 = torch.int64


MESSAGES: list[Message] = [
    ("out shape", lambda v: spec("rms_norm").out(torch.ones(2, 4), torch.ones(4), 1e-6,
                                                  out=torch.empty(4, 2).t()),
     ValueError, "out must be a contiguous torch.float32 tensor of shape [2, 4],"
     " got torch.float32 [2, 4] (contiguous=False)"),
    ("out device", lambda v: spec("muls_add").out(
        torch.ones(2), torch.ones(2), 1.0, out=torch.empty(2, device="meta")),
     DeviceMismatchError, "out is on meta but x is on cpu"),
    ("out aliasing", lambda v: (lambda x: spec("rms_norm").out(x, torch.ones(4), 1e-6,
                                                                out=x))(torch.ones(2, 4)),
     ValueError, "out must not share memory with x"),
    ("missing out", lambda v: spec("add_rms_norm_dynamic_mx_quant").out(
        torch.ones(2, 32), torch.ones(2, 32), torch.ones(32), 1e-6,
        out=torch.empty(2, 32).to(torch.float8_e4m3fn),
        scale_out=torch.empty(2, 1).to(torch.float8_e8m0fnu)),
     TypeError, "add_rms_norm_dynamic_mx_quant_out needs the keyword output(s) ['residual_out']"),
    ("no out helper", lambda v: spec("bgmv_expand").out(*positional_args(v, "bgmv_expand"),
                                                         out=torch.empty(0)),
     TypeError, "bgmv_expand has no _out helper (it returns a new tensor)"),
    ("too many arguments", lambda v: spec("rms_norm").checked_reference(
        torch.ones(2, 4), torch.ones(4), 1e-6, 1.0),
     TypeError, "ascend::rms_norm takes 3 arguments, got 4"),
    ("missing argument", lambda v: spec("rms_norm").checked_reference(torch.ones(2, 4)),
     TypeError, "ascend::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor: missing"
     " ['weight', 'eps'], unknown []"),
]


test_exact_message = exact_message_test(MESSAGES)


DOCUMENTED = (ValueError, DeviceMismatchError)


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32,
          torch.int64, torch.int8, torch.bool]


SPECIAL_EPS = [1e-6, 1e-5, 0.1, 0.0, -0.0, -1e-6, float("nan"), float("inf"), -float("inf"),
               5e-324, 1e300]


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _shape(draw: st.DrawFn, like: torch.Tensor) -> tuple[int, ...]:
    kept = tuple(like.shape)
    return draw(
        st.one_of(
            st.just(kept),
            st.just(()),
            st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple),
            st.just((*kept[:-1], 0)) if kept else st.just((0,)),
            st.just((*kept[:-1], kept[-1] + 1)) if kept else st.just((1,)),
        )
    )


def _tensor(draw: st.DrawFn, like: torch.Tensor) -> torch.Tensor:
    shape = _shape(draw, like)
    dtype = draw(st.sampled_from([like.dtype, *DTYPES]))
    device = draw(st.sampled_from(["cpu", "cpu", "cpu", "meta"]))
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    lo, hi = draw(st.sampled_from([(-2, 10), (0, 3), (-1000, 1000)]))
    if dtype == torch.int8:
        lo, hi = max(lo, -128), min(hi, 127)
    return torch.randint(lo, hi, shape, dtype=dtype)


def _value(draw: st.DrawFn, name: str, valid: Any) -> Any:
    if isinstance(valid, torch.Tensor):
        return _tensor(draw, valid)
    if name == "eps":
        return draw(st.one_of(st.sampled_from(SPECIAL_EPS), st.floats()))
    if isinstance(valid, bool):
        return draw(st.booleans())
    if isinstance(valid, int):
        return draw(st.one_of(st.just(valid), st.integers(-3, 3), st.integers(-500, 500)))
    if isinstance(valid, float):
        return draw(st.one_of(st.just(valid), st.floats()))
    return valid  # None: an absent optional tensor


@st.composite
def _arguments(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    names = list(valid)
    changed = draw(st.sets(st.sampled_from(names), min_size=1, max_size=min(3, len(names))))
    return {k: _value(draw, k, v) if k in changed else v for k, v in valid.items()}


def _devices(args: dict[str, Any]) -> set[str]:
    return {v.device.type for v in args.values() if isinstance(v, torch.Tensor)}


def _must_fail(args: dict[str, Any]) -> bool:
    """Invalid on its face: tensors on two devices, or an eps that is not finite and > 0."""
    eps = args.get("eps", 1.0)
    return len(_devices(args)) > 1 or not (eps > 0 and math.isfinite(eps))


@pytest.mark.parametrize("op", OP_NAMES)
def test_only_documented_errors_escape(op: str, valid_args: Any) -> None:
    @FUZZ
    @given(args=_arguments(valid_args(op)))
    def run(args: dict[str, Any]) -> None:
        try:
            result = getattr(A, op)(*args.values())
        except DOCUMENTED:
            return
        assert not _must_fail(args), "accepted tensors on two devices or a bad eps"
        outs = _outputs(result)
        assert all(isinstance(o, torch.Tensor) for o in outs)
        assert not outs or {o.device.type for o in outs} == _devices(args)

    run()


@pytest.mark.parametrize("op", ["rms_norm", "split_qkv_rmsnorm_rope", "rotary_embedding",
                                "add_rms_norm_quant", "muls_add"])
def test_npu_adapters_raise_only_documented_errors(
    op: str, valid_args: Any, fake_npu_on_cpu: Any
) -> None:
    @settings(FUZZ, max_examples=30)
    @given(args=_arguments(valid_args(op)))
    def run(args: dict[str, Any]) -> None:
        try:
            getattr(A, op)(*args.values())
        except DOCUMENTED:
            return
        assert not _must_fail(args), "accepted tensors on two devices or a bad eps"

    run()

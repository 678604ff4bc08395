"""The Ascend MoE CustomOp, its experts and the forward context's MoE method (host CPU).

Expected values come from Hugging Face transformers' Qwen3-MoE block or from the math written
out per token; the forward-context tests go through vLLM's own ``set_forward_context`` and
the platform hook.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from vllm_ascend.checkpoints.tiny_models import make_tiny_model
from vllm_ascend.distributed.moe_comm import MoECommType
from vllm_ascend.distributed.moe_dispatch import AllGatherDispatch, AllToAllDispatch
from vllm_ascend.distributed.moe_experts import ExpertWeights, expert_outputs
from vllm_ascend.engine.resolution import extract_facts
from vllm_ascend.process.process_setup import reset_process_setup

HIDDEN, INTER, EXPERTS = 16, 8, 4


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model("qwen3_moe", tmp_path_factory.mktemp("moe"), layers=1, hidden=64,
                           head_dim=32)


def _hf_block(norm_topk_prob: bool, top_k: int = 2):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = Qwen3MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=INTER,
                            num_experts=EXPERTS, num_experts_per_tok=top_k,
                            norm_topk_prob=norm_topk_prob)
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    block = Qwen3MoeSparseMoeBlock(config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.3)
    return block


@pytest.mark.parametrize("top_k", [1, 2, EXPERTS])
@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_vllm_router_and_our_experts_equal_the_transformers_block(norm_topk_prob, top_k) -> None:
    from vllm.model_executor.layers.fused_moe.router.cpu_router import select_experts

    block = _hf_block(norm_topk_prob, top_k)
    x = torch.randn(7, HIDDEN)
    with torch.no_grad():
        expected = block(x[None])[0]
        logits = x @ block.gate.weight.T
    weights, ids = select_experts(x, logits, top_k, False, norm_topk_prob)
    experts = ExpertWeights(block.experts.gate_up_proj.detach(), block.experts.down_proj.detach())
    torch.testing.assert_close(expert_outputs(x, weights, ids, experts), expected,
                               atol=1e-5, rtol=1e-5)


def _per_token(x, weights, ids, experts: ExpertWeights, act) -> torch.Tensor:
    """The expert sum written out per token, in float64."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            if e < 0:
                continue
            w = float(weights[t, k])
            xin = x[t].double() * (w if experts.weight_on_input else 1.0)
            h = experts.w13[e].double() @ xin
            if experts.w13_bias is not None:
                h = h + experts.w13_bias[e].double()
            y = experts.w2[e].double() @ (act(h[:INTER]) * h[INTER:])
            if experts.w2_bias is not None:
                y = y + experts.w2_bias[e].double()
            out[t] += y * (1.0 if experts.weight_on_input else w)
    return out


@pytest.mark.parametrize(
    ("kwargs", "act"),
    [
        ({}, F.silu),
        ({"activation": "gelu"}, F.gelu),
        ({"activation": "gelu_tanh"}, lambda h: F.gelu(h, approximate="tanh")),
        ({"with_bias": True}, F.silu),
        ({"weight_on_input": True}, F.silu),
    ],
)
def test_expert_outputs_follow_the_written_out_math(kwargs, act) -> None:
    g = torch.Generator().manual_seed(1)
    with_bias = kwargs.pop("with_bias", False)
    experts = ExpertWeights(
        torch.randn(3, 2 * INTER, HIDDEN, generator=g) / 4,
        torch.randn(3, HIDDEN, INTER, generator=g) / 4,
        torch.randn(3, 2 * INTER, generator=g) if with_bias else None,
        torch.randn(3, HIDDEN, generator=g) if with_bias else None, **kwargs,
    )
    x = torch.randn(5, HIDDEN, generator=g)
    ids = torch.tensor([[0, 2], [1, -1], [-1, -1], [2, 2], [1, 0]])  # -1: another rank's
    weights = torch.rand(5, 2, generator=g)
    out = expert_outputs(x, weights, ids, experts)
    assert out.dtype == torch.float32 and not out[2].any()  # no local expert: zeros
    torch.testing.assert_close(out.double(), _per_token(x, weights, ids, experts, act),
                               atol=1e-5, rtol=1e-5)
    assert expert_outputs(x[:0], weights[:0], ids[:0], experts).shape == (0, HIDDEN)


@pytest.mark.parametrize(
    ("w13", "w2", "kwargs", "fragment"),
    [
        ((2, 16, 8), (2, 8, 8), {"activation": "relu2"},
         "activation 'relu2' is not supported; allowed: silu, gelu, gelu_tanh"),
        ((2, 16), (2, 8, 8), {}, r"w13 \[E, 2\*I, H\] and w2 \[E, H, I\]"),
        ((2, 16, 8), (3, 8, 8), {}, "with the same E"),
        ((2, 12, 8), (2, 8, 8), {}, "disagree on H or I"),
    ],
)
def test_expert_weights_reject_bad_shapes(w13, w2, kwargs, fragment) -> None:
    with pytest.raises(ValueError, match=fragment):
        ExpertWeights(torch.zeros(w13), torch.zeros(w2), **kwargs)


def test_a_local_id_beyond_the_local_experts_is_an_error() -> None:
    experts = ExpertWeights(torch.zeros(2, 2 * INTER, HIDDEN), torch.zeros(2, HIDDEN, INTER))
    with pytest.raises(ValueError, match="local expert id 2 out of range for 2 experts"):
        expert_outputs(torch.zeros(1, HIDDEN), torch.ones(1, 1), torch.tensor([[2]]), experts)


def _layer(ep_size: int, ep_rank: int, strategy: str, expert_map, **extra):
    parallel = types.SimpleNamespace(use_ep=ep_size > 1, ep_size=ep_size, ep_rank=ep_rank)
    return types.SimpleNamespace(
        moe_config=types.SimpleNamespace(moe_parallel_config=parallel, is_act_and_mul=True),
        global_num_experts=5, expert_placement_strategy=strategy, expert_map=expert_map,
        layer_name="model.layers.0.mlp.experts", activation=types.SimpleNamespace(value="silu"),
        **extra,
    )


@pytest.mark.parametrize(
    ("strategy", "rank", "mine", "owner"),
    [
        ("linear", 1, [-1, -1, -1, 0, 1], [0, 0, 0, 1, 1]),  # 5 experts: 3 + 2
        ("round_robin", 0, [0, -1, 1, -1, 2], [0, 1, 0, 1, 0]),
    ],
)
def test_placement_follows_vllm_expert_maps(strategy, rank, mine, owner) -> None:
    from vllm_ascend.ops.moe import placement_of

    placement = placement_of(_layer(2, rank, strategy, torch.tensor(mine, dtype=torch.int32)))
    assert placement is not None and placement.owner.tolist() == owner
    assert placement_of(_layer(1, 0, "linear", None)) is None  # no EP: everything local


def test_placement_refuses_a_map_vllm_did_not_make() -> None:
    from vllm_ascend.ops.moe import placement_of

    moved = torch.tensor([0, 1, 2, -1, -1], dtype=torch.int32)  # rank 1 claims rank 0's experts
    with pytest.raises(RuntimeError, match="expert map of EP rank 1 differs"):
        placement_of(_layer(2, 1, "linear", moved))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, None),
        ({"activation": types.SimpleNamespace(value="swigluoai")}, "activation 'swigluoai'"),
        ({"swiglu_limit": 7.0}, "swiglu_limit=7.0"),
        ({"gated": False}, "a non-gated expert MLP"),
    ],
)
def test_unsupported_reason(change, reason) -> None:
    from vllm_ascend.ops.moe import unsupported_reason

    layer = _layer(1, 0, "linear", None)
    layer.moe_config.is_act_and_mul = change.pop("gated", True)
    for key, value in change.items():
        setattr(layer, key, value)
    found = unsupported_reason(layer)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_unsupported_layers_go_to_vllm_without_ep_and_fail_with_it() -> None:
    from vllm_ascend.ops.moe import plain_torch_supported

    assert plain_torch_supported(_layer(2, 0, "linear", None)) is True
    odd = types.SimpleNamespace(value="swigluoai")
    single = _layer(1, 0, "linear", None)
    single.activation = odd
    assert plain_torch_supported(single) is False  # vLLM's own CPU kernel runs it
    parallel = _layer(2, 1, "linear", None)
    parallel.activation = odd
    with pytest.raises(ValueError, match=r"expert parallelism on the host CPU needs the plain"
                                         r"-torch experts, which do not support activation"):
        plain_torch_supported(parallel)


def test_moe_op_is_defined_once_with_a_fake(ascend_cpu_platform) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from vllm_ascend.ops.moe import register_moe_op

    register_moe_op()
    assert register_moe_op() is False  # already defined
    op = torch.ops.vllm_ascend.moe_routed_experts.default
    assert str(op._schema) == ("vllm_ascend::moe_routed_experts(Tensor x, Tensor topk_weights,"
                               " Tensor topk_ids, str layer_name) -> Tensor")
    with FakeTensorMode():
        out = op(torch.empty(9, 32, dtype=torch.bfloat16), torch.empty(9, 2),
                 torch.empty(9, 2, dtype=torch.int32), "layer")
    assert out.shape == (9, 32) and out.dtype == torch.bfloat16


def test_moe_op_names_a_missing_layer(make_vllm_config) -> None:
    from vllm.forward_context import set_forward_context
    from vllm_ascend.ops.moe import register_moe_op

    register_moe_op()
    cfg = make_vllm_config(enforce_eager=True)
    with set_forward_context(None, cfg, num_tokens=1), pytest.raises(
        RuntimeError, match="no Ascend MoE layer named 'nope'"
    ):
        torch.ops.vllm_ascend.moe_routed_experts(
            torch.zeros(1, 4), torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int32), "nope"
        )


def _moe_config(model: Path, **kwargs):
    from vllm.engine.arg_utils import EngineArgs

    args = {"model": str(model), "load_format": "dummy", "dtype": "float32",
            "max_model_len": 128, "max_num_seqs": 4, **kwargs}
    return EngineArgs(**args).create_engine_config()


@pytest.mark.parametrize(
    ("kwargs", "tokens", "expected"),
    [
        ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, 3, "ALLGATHER"),
        ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, 4, "ALLGATHER"),
        ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, 5, "ALLTOALL"),
        ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, 512, "ALLTOALL"),
        ({"tensor_parallel_size": 2}, 5, "ALLGATHER"),  # EP off
        ({}, 5, "ALLGATHER"),  # one rank
    ],
)
def test_each_forward_carries_the_method_chosen_for_it(
    ascend_cpu_platform, tiny_moe, kwargs, tokens, expected
) -> None:
    from vllm.forward_context import set_forward_context
    from vllm_ascend.base.forward_context import current_moe_comm
    from vllm_ascend.process.process_setup import reset_process_setup

    cfg = _moe_config(tiny_moe, **kwargs)  # max_num_seqs 4: the decode budget
    try:
        assert current_moe_comm() == (None, None)  # outside a forward
        with set_forward_context(None, cfg, num_tokens=tokens):  # vLLM -> the platform hook
            comm_type, method = current_moe_comm()
        assert comm_type is MoECommType[expected]
        assert type(method) is {"ALLGATHER": AllGatherDispatch,
                                 "ALLTOALL": AllToAllDispatch}[expected]
    finally:
        reset_process_setup()


def test_dense_models_carry_no_moe_method(ascend_cpu_platform, make_vllm_config) -> None:
    from vllm.forward_context import set_forward_context
    from vllm_ascend.base.forward_context import current_moe_comm
    from vllm_ascend.process.process_setup import reset_process_setup

    with set_forward_context(None, make_vllm_config(enforce_eager=True), num_tokens=9):
        assert current_moe_comm() == (None, None)
    reset_process_setup()


def test_model_runner_v1_fields_are_read_as_attributes(ascend_cpu_platform, tiny_moe) -> None:
    from vllm_ascend.base import forward_context as fc

    cfg = _moe_config(tiny_moe, tensor_parallel_size=2, enable_expert_parallel=True)
    state = fc.AscendForwardState.from_vllm_config(cfg, extract_facts(cfg, "cpu"))
    assert state.moe_inputs.decode_tokens == 4 and state.moe_inputs.ep_group_size == 2
    with fc.set_ascend_forward_context(None, cfg, num_tokens=5, state=state):
        comm_type, method = fc.current_moe_comm()
    assert comm_type is MoECommType.ALLTOALL and isinstance(method, AllToAllDispatch)
    reset_process_setup()


def test_decode_budget_counts_draft_tokens(ascend_cpu_platform, tiny_moe) -> None:
    from vllm_ascend.base import forward_context as fc

    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2,
            "prompt_lookup_min": 1}
    cfg = _moe_config(tiny_moe, speculative_config=spec)
    # 4 sequences x (1 + 2 draft tokens)
    state = fc.AscendForwardState.from_vllm_config(cfg, extract_facts(cfg, "cpu"))
    assert state.moe_inputs.decode_tokens == 12
    plain_cfg = _moe_config(tiny_moe)
    plain = fc.AscendForwardState.from_vllm_config(plain_cfg, extract_facts(plain_cfg, "cpu"),
                                                   uniform_decode_query_len=3)
    assert plain.moe_inputs.decode_tokens == 12


# A real vLLM Qwen3-MoE block (world size 1) against transformers' block, eager and under
# torch.compile, in a fresh interpreter (it initialises vLLM's process groups).
LAYER_SNIPPET = """
import json, tempfile, torch
from transformers import AutoConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock as HFBlock
from vllm.config import set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.engine.arg_utils import EngineArgs
from vllm.forward_context import create_forward_context, override_forward_context
from vllm.forward_context import set_forward_context
from vllm.model_executor.models.qwen3_moe import Qwen3MoeSparseMoeBlock
from vllm_ascend.distributed.moe_comm import MoECommType
from vllm_ascend.distributed.moe_experts import ExpertPlacement
from vllm_ascend.process.compat_adjustments import apply_compat_adjustments
from vllm_ascend.engine.registry import published_ascend_config as current_ascend_config

apply_compat_adjustments("cpu", config=current_ascend_config)
cfg = EngineArgs(model={model!r}, load_format="dummy", dtype="float32", max_model_len=128,
                 max_num_seqs=4).create_engine_config()
with set_current_vllm_config(cfg):
    init_distributed_environment(1, 0, "file://" + tempfile.mkdtemp() + "/init", 0, "gloo")
    initialize_model_parallel(1, 1)
    block = Qwen3MoeSparseMoeBlock(cfg, prefix="model.layers.0.mlp")
hf_config = AutoConfig.from_pretrained({model!r})
hf_config._experts_implementation = "eager"
torch.manual_seed(0)
hf = HFBlock(hf_config).eval()
experts = block.experts.routed_experts
with torch.no_grad():
    for p in hf.parameters():
        p.normal_(0.0, 0.2)
    block.gate.weight.copy_(hf.gate.weight)
    experts.w13_weight.copy_(hf.experts.gate_up_proj)
    experts.w2_weight.copy_(hf.experts.down_proj)
for module in block.modules():  # what vLLM's loader does after loading
    if getattr(module, "quant_method", None) is not None:
        module.quant_method.process_weights_after_loading(module)
method = experts.quant_method
targets = []

def backend(gm, example_inputs):
    targets.extend(str(n.target) for n in gm.graph.nodes)
    return gm.forward

result = {{"class": type(method).__name__, "active": method.runs_ascend_path}}
x = torch.randn(5, hf_config.hidden_size)
with torch.no_grad():
    expected = hf(x[None])[0]
    with set_forward_context(None, cfg, num_tokens=5):
        eager = block(x)
    with set_forward_context(None, cfg, num_tokens=5):
        compiled = torch.compile(block, backend=backend)(x)
result["eager_err"] = float((eager - expected).abs().max())
result["compiled_err"] = float((compiled - expected).abs().max())
result["moe_nodes"] = [t for t in targets if "moe" in t]
result["counts"] = [[m, t, n] for (m, t), n in method.comm_counts.items()]
# A method only an NPU can execute, as a forward context could carry it on another platform.
method._placement = ExpertPlacement.from_expert_maps(
    [torch.tensor([0, 1, -1, -1]), torch.tensor([-1, -1, 0, 1])])
ctx = create_forward_context(None, cfg, additional_kwargs={{
    "moe_comm_type": MoECommType.MC2, "moe_comm_method": None}})
try:
    with override_forward_context(ctx):
        method.run(experts, x, torch.ones(5, 2), torch.zeros(5, 2, dtype=torch.int32))
except RuntimeError as exc:
    result["mc2_error"] = str(exc)
print("RESULT " + json.dumps(result))
"""


def test_real_vllm_block_without_ep_runs_vllms_kernel_eager_and_compiled(
    tiny_moe, tmp_path, py_runner, make_env
) -> None:
    result = py_runner(LAYER_SNIPPET.format(model=str(tiny_moe)), make_env(tmp_path),
                       timeout=600)
    assert result["class"] == "AscendUnquantizedFusedMoEMethod" and result["active"] is True
    assert result["eager_err"] < 1e-5 and result["compiled_err"] < 1e-5
    # one rank, no EP: nothing is exchanged, so vLLM's own CPU kernel is traced into the graph
    # (as in stock vLLM), not the opaque Ascend op, and no communication is counted
    assert result["moe_nodes"] == ["_C.cpu_fused_moe"]
    assert result["counts"] == []
    assert result["mc2_error"] == ("MoE communication MC2 needs NPU hardware; the host-CPU"
                                   " platform executes ALLGATHER and ALLTOALL")

"""NPU graph mode on the emulated `npu` device: graphs give eager's greedy tokens, and the
emulated graph catches the two classic runtime bugs.

Three graph engines. The tiny llama runs FULL_DECODE_ONLY without compilation. The tiny qwen3
runs the NPU runtime's default (no graph setting at all: vLLM's compile through the Ascend
compiler, FULL_AND_PIECEWISE: full graphs for decode batches, piecewise graphs around attention
for mixed ones). The same qwen3 runs the NPU graph extension: compilation on, FULL_DECODE_ONLY,
`ascend_compilation_config.enable_npugraph_ex` (`compiler.graph_backend` picks npugraph_ex only
for a whole-forward graph mode, never for FULL_AND_PIECEWISE, where the fused piecewise graphs
run as ATen graphs, the "eager" backend). The llama runs vLLM's native rope; the qwen3 engines
run the default custom ops, like the host-CPU engines of `test_fusion_e2e.py`, so their compile
gives the Ascend passes the same `ascend.*` ops (the NPU adapters run them).

The Ascend compile path: the passes find the host-CPU platform's candidate sites for the same
model (rewriting those the SoC's kernels support), and the graphs they were given hold the
`torch.ops.ascend.*` calls. With FULL_AND_PIECEWISE vLLM splits the forward at the attention
call and the KV-cache update, so the kv_cache_attention pass sees neither; with
FULL_DECODE_ONLY the platform compiles the whole forward as one graph (`splitting_ops=[]`), so
every pass sees what the host-CPU platform's passes see. The backend then hands the rewritten
graph to npugraph_ex: on the emulated device that is the harness's npugraph_ex
(`torch_npu_double.emulation.graph_ex`, under torch_npu's module names), whose compiled
graph runs the graph's ATen and `ascend.*` calls on the `npu` tensors (the `ascend.*` ops
through their NPU adapters and the emulated torch_npu kernels) and counts the graphs it
compiled; the runtime's NPUGraph captures those runs as FULL decode graphs.

The emulated `NPUGraph` records the device operations a capture dispatches and replays exactly
those on the captured memory (no model Python runs in a replay). The reference is the same
runtime run eagerly (`enforce_eager`), which `test_npu_runtime.py` checks against the host-CPU
platform. Batches of 3 and 5 decode sequences lie between capture sizes (padded to 4 and 8);
the mixed case puts a chunked prefill (300 tokens, 128 per step) and a prefix-cache hit next to
running decodes.

The faults (`vllm_ascend_testing.graph_faults`) are injected into the graph engine's runner: a
fresh token-id tensor each step instead of the captured one must change the tokens, and clearing
it must restore them (the fault, not the run order, made the difference); a replay without
`update_full_graph_params` never proceeds (nothing records the `ExternalEvent` its task groups
wait on), which the emulated device reports at the host's next wait.

Graph memory before the KV cache: on a small emulated NPU, a graph engine whose KV cache is
sized from --gpu-memory-utilization starts only because the graphs' profiled memory was taken
from the KV cache's share, and a --max-model-len that fits only without that share fails before
any capture with one error naming it. The share taken is the runtime's per-token estimate
(`npu_runtime.graph_memory`), not vLLM's extrapolation: the KV blocks are the share less that
estimate, more than vLLM's figure would leave, and the captures fit in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker

from tests.integration.test_fusion_e2e import (
    ATTENTION_OP,
    EXPECTED_SITES,
    FUSED_ATTENTION_OP,
    KV_UPDATE_OP,
    NUM_LAYERS,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EMULATED = {"VLLM_ASCEND_EMULATED_NPUS": "1"}
NATIVE_ROPE = ["-RotaryEmbedding", "-Llama3RotaryEmbedding"]
CAPTURE_SIZES = [1, 2, 4, 8]
MAX_SEQS = 8
BATCHES = (1, 3, 5, 7)  # 3 -> graph of 4 (one dummy request), 5 and 7 -> graph of 8
#: The graph engines run bfloat16, so attention is FIA (a float32 model's attention runs the
#: plain-torch reference, which no FULL graph may hold: see the float32 test below).
DTYPE = "bfloat16"
MAX_TOKENS = 10
PROMPTS = ["Hello, my name is", "The capital of France is", "The future of AI is",
           "Once upon a time", "In the beginning", "My favourite food is",
           "The quick brown fox", "Water boils at"]


def _long_prompts() -> dict[str, list[int]]:
    shared = [(i * 37 + 11) % 240 + 5 for i in range(384)]
    return {
        "chunked": [(i * 53 + 7) % 240 + 5 for i in range(300)],
        "prefix_a": [*shared, 17, 23, 42],
        "prefix_b": [*shared, 99, 7, 3, 64, 12],
    }


@dataclass(frozen=True)
class GraphEngine:
    """A graph engine of the module fixture: its architecture, compilation settings, extra
    `ascend_compilation_config` keys and the graph mode it must run."""

    arch: str
    compilation: dict[str, Any]
    mode: str
    ascend_compilation: dict[str, Any] = field(default_factory=dict)


FULL_DECODE_ONLY = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}  # no compilation
GRAPH_ENGINES = {
    "llama": GraphEngine("llama", FULL_DECODE_ONLY, "FULL_DECODE_ONLY"),
    "qwen3": GraphEngine("qwen3", {}, "FULL_AND_PIECEWISE"),  # the default
    "qwen3_npugraph_ex": GraphEngine(
        "qwen3", {"cudagraph_mode": "FULL_DECODE_ONLY"}, "FULL_DECODE_ONLY",
        {"enable_npugraph_ex": True}),
}
ENGINES = list(GRAPH_ENGINES)
#: vLLM's custom-op directives of each architecture's engines (eager and graphs alike).
CUSTOM_OPS = {"llama": NATIVE_ROPE, "qwen3": []}


def _kwargs(model: str, graphs: dict[str, Any] | None,
            custom_ops: list[str] = NATIVE_ROPE,
            ascend_compilation: dict[str, Any] | None = None,
            dtype: str = DTYPE) -> dict[str, Any]:
    kwargs = llm_kwargs(model, compile=graphs is not None, max_model_len=512,
                        max_num_seqs=MAX_SEQS, kv_cache_mib=64, dtype=dtype)
    compilation: dict[str, Any] = {"custom_ops": list(custom_ops)}
    if graphs is not None:
        compilation.update(graphs, cudagraph_capture_sizes=CAPTURE_SIZES)
    kwargs["compilation_config"] = compilation
    kwargs["additional_config"]["ascend_compilation_config"].update(ascend_compilation or {})
    kwargs["max_num_batched_tokens"] = 128
    kwargs["enable_prefix_caching"] = True
    return kwargs


def _tokens(worker: LLMWorker, name: str, prompts: list[Any]) -> list[list[int]]:
    answer = worker.request("generate", name=name, prompts=prompts, max_tokens=MAX_TOKENS)
    return [o["token_ids"] for o in answer["outputs"]]


def _cases(worker: LLMWorker, name: str) -> dict[str, list[list[int]]]:
    runs = {f"batch_{n}": _tokens(worker, name, PROMPTS[:n]) for n in BATCHES}
    long = _long_prompts()
    runs["prefix_a"] = _tokens(worker, name, [long["prefix_a"]])
    # prefix_b hits prefix_a's three cached blocks; "chunked" prefills in 3 steps while the
    # short prompts decode.
    runs["mixed"] = _tokens(worker, name, [long["prefix_b"], long["chunked"], *PROMPTS[:3]])
    return runs


#: Decode steps per sync count: one step's count is that of a 1 + SYNC_STEPS token generation
#: minus that of a 1-token one (prefill and sampling set-up cancel), as `benchmarks graphs`.
SYNC_STEPS = 4


def _decode_syncs(worker: LLMWorker, name: str) -> dict[str, Any]:
    """Device-to-host syncs of one decode step of batch 3 (padded into the graph of 4): the
    total (`HostOpCounter.syncs`, which includes device/stream `synchronize()` calls) and by
    cause; `Event.synchronize()` waits are counted apart by the emulation."""
    prompts = PROMPTS[:3]
    one = worker.request("host_ops", name=name, prompts=prompts, max_tokens=1)
    many = worker.request("host_ops", name=name, prompts=prompts, max_tokens=1 + SYNC_STEPS)
    reasons = {k: (n - one["sync_reasons"].get(k, 0)) / SYNC_STEPS
               for k, n in many["sync_reasons"].items()}
    return {"syncs": (many["syncs"] - one["syncs"]) / SYNC_STEPS,
            "reasons": {k: v for k, v in reasons.items() if v}}


@pytest.fixture(scope="module")
def graph_runs(tiny_models: Any, start_worker: Callable[..., LLMWorker]) -> dict[str, Any]:
    """Per graph engine: eager tokens (one eager engine per architecture), graph tokens, the
    graph report (with the emulated graph extension's tally so far), the fusion report, and
    the tokens with each fault injected and after clearing it."""
    worker = start_worker("npu-graphs", device="npu", **EMULATED)
    eager: dict[str, dict[str, list[list[int]]]] = {}
    eager_syncs: dict[str, dict[str, Any]] = {}
    found: dict[str, Any] = {}
    for name, engine in GRAPH_ENGINES.items():
        model = str(tiny_models.path(engine.arch))
        ops = CUSTOM_OPS[engine.arch]
        if engine.arch not in eager:
            worker.request("load", name="eager", kwargs=_kwargs(model, None, ops), timeout=600)
            eager[engine.arch] = _cases(worker, "eager")
            eager_syncs[engine.arch] = _decode_syncs(worker, "eager")
            worker.request("unload", name="eager")
        kwargs = _kwargs(model, engine.compilation, ops, engine.ascend_compilation)
        worker.request("load", name="graphs", kwargs=kwargs, timeout=600)
        graphs = _cases(worker, "graphs")
        report = worker.request("graph_report", name="graphs")["workers"][0]
        fusion = worker.request("fusion_report", name="graphs")
        syncs = {"eager": eager_syncs[engine.arch], "graphs": _decode_syncs(worker, "graphs")}
        faults: dict[str, Any] = {}
        for fault in ("fresh_input",):  # skip_update hangs the device: its own process below
            worker.request("graph_fault", name="graphs", fault=fault)
            broken = _tokens(worker, "graphs", PROMPTS[:3])
            worker.request("graph_fault", name="graphs", fault=None)
            faults[fault] = {"broken": broken, "cleared": _tokens(worker, "graphs", PROMPTS[:3])}
        worker.request("unload", name="graphs")
        found[name] = {"eager": eager[engine.arch], "graphs": graphs, "report": report,
                       "fusion": fusion, "faults": faults, "syncs": syncs}
    return found


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", [*(f"batch_{n}" for n in BATCHES), "prefix_a", "mixed"])
def test_full_decode_graphs_give_eager_tokens(graph_runs, engine, case) -> None:
    eager, graphs = graph_runs[engine]["eager"][case], graph_runs[engine]["graphs"][case]
    assert all(len(t) == MAX_TOKENS for t in graphs)
    assert graphs == eager


#: TP=2's capture sizes: batch 1 replays the graph of 2 and batch 3 the graph of 4 (both
#: padded); batches 5 and 7 run eagerly.
TP2_SIZES = [2, 4]


def test_tp2_full_decode_graphs_give_the_tp1_tokens(
    graph_runs: dict[str, Any], tiny_models: Any, start_worker: Callable[..., LLMWorker]
) -> None:
    """Issue 44 item 2: the tiny llama over two emulated NPUs (TP=2, bfloat16) captures FULL
    decode graphs, whose all-reduces are the emulated hccl's device kernels, on both ranks,
    replays them, and gives TP=1 eager's tokens in every case (padded batches, eager batches
    above the largest graph, a prefix hit, a chunked prefill beside decodes). A replayed
    all-reduce that read its input buffer as it was at capture would change the tokens."""
    worker = start_worker("npu-graphs-tp2", device="npu", VLLM_ASCEND_EMULATED_NPUS="2")
    kwargs = _kwargs(str(tiny_models.path("llama")), FULL_DECODE_ONLY, CUSTOM_OPS["llama"])
    kwargs["compilation_config"]["cudagraph_capture_sizes"] = TP2_SIZES
    kwargs["tensor_parallel_size"] = 2
    worker.request("load", name="tp2", kwargs=kwargs, timeout=600)
    runs = _cases(worker, "tp2")
    reports = worker.request("graph_report", name="tp2")["workers"]
    worker.close()
    assert runs == graph_runs["llama"]["eager"]
    assert len(reports) == 2, reports
    for report in reports:
        assert report["mode"] == "FULL_DECODE_ONLY", report
        replays = {int(k): v for k, v in report["replays"].items()}
        assert sorted(replays) == TP2_SIZES, report
        assert all(n >= MAX_TOKENS - 1 for n in replays.values()), report


@pytest.mark.parametrize("engine", ENGINES)
def test_decode_steps_replay_the_padded_capture_size(graph_runs, engine) -> None:
    """Every capture size was captured as a FULL graph; batches of 1, 3 (-> 4), 5 and 7
    (-> 8) replayed; FULL_AND_PIECEWISE also captured 3 pieces (2 layers) per size."""
    report = graph_runs[engine]["report"]
    assert report["mode"] == GRAPH_ENGINES[engine].mode
    replays = {int(k): v for k, v in report["replays"].items()}
    assert sorted(replays) == CAPTURE_SIZES
    for size in (1, 4, 8):
        assert replays[size] >= MAX_TOKENS - 1, replays
    pieces = 3 if report["mode"] == "FULL_AND_PIECEWISE" else 0
    assert report["captures"] == len(CAPTURE_SIZES) * (1 + pieces)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_decode_step_synchronises_the_device_with_the_host_zero_times(
        graph_runs, engine) -> None:
    """Issue 43 item 6: a decode step (batch 3, in the graph of 4) reads nothing back from the
    device, in the graph engine's decode replays and in eager mode alike: the runtime's step
    preparation (slot mapping, attention metadata, the FULL parameter update) keeps every
    count on the host, and vLLM's own runner needs no device-to-host sync in a decode step
    (its waits are `Event.synchronize()`, counted apart). Any sync added to step preparation
    shows here as a nonzero count with its cause."""
    syncs = graph_runs[engine]["syncs"]
    assert syncs["graphs"] == {"syncs": 0, "reasons": {}}, syncs
    assert syncs["eager"] == {"syncs": 0, "reasons": {}}, syncs


def _npu_sites(whole_forward: bool) -> dict[str, dict[str, int]]:
    """The host-CPU table of the tiny qwen3 (`test_fusion_e2e.EXPECTED_SITES`) as the NPU SoC
    rules leave it for the engines' dtype: the qk-norm + rope sites are rewritten only where
    the NPU kernel takes the dtype (bfloat16, head 64: `ascend_kernels.capability`);
    norm_quant is built only for a dtype its NPU kernels take (the model has no quantized
    layer, so it finds nothing either way); without the whole forward (`whole_forward`
    False: FULL_AND_PIECEWISE) kv_cache_attention has no site, its two ops being vLLM's
    splitting ops."""
    from ascend_kernels.capability import supports
    from vllm_ascend.engine.norm_quant_gate import decide_norm_quant

    sites = {name: dict(site) for name, site in EXPECTED_SITES["qwen3"].items()}
    if not any(supports("split_qkv_rmsnorm_rope", dtype=DTYPE, head_dim=64, soc=soc)
               for soc in ("A2", "A3", "A5")):
        sites["qknorm_rope"]["matched"] = 0
    if not decide_norm_quant(True, "A2", DTYPE, None).enabled:
        assert sites.pop("norm_quant") == {"expected": 0, "matched": 0}
    if not whole_forward:
        sites["kv_cache_attention"] = {"expected": 0, "matched": 0}
    return sites


@pytest.mark.parametrize("engine", ["qwen3", "qwen3_npugraph_ex"])
def test_the_npu_compile_runs_the_ascend_passes_on_the_ascend_ops(graph_runs, engine) -> None:
    """The qwen3 graph engines compiled on the NPU platform: their passes ran on fresh graphs
    (no compile cache), were given one `ascend.rotary_embedding` per attention layer fed by the
    `ascend.rms_norm` of q and k, and found the host-CPU platform's candidate sites for the
    same model (`_npu_sites`: FULL_AND_PIECEWISE's piecewise graphs lack the attention;
    FULL_DECODE_ONLY's one graph is the whole forward, as on the host CPU)."""
    fusion = graph_runs[engine]["fusion"]
    sites = fusion["sites"]
    assert sites["from_cache"] is False and sites["graphs"] > 0, sites
    expected = _npu_sites(whole_forward=GRAPH_ENGINES[engine].mode == "FULL_DECODE_ONLY")
    assert ("norm_quant" in sites["passes"]) == ("norm_quant" in expected), sites
    for name, site in expected.items():
        assert sites["passes"][name] == site, (name, sites)
        assert fusion["report"][name] == site["matched"], fusion["report"]
    ops = sites["ascend_ops"]
    assert ops.get("ascend.rotary_embedding") == NUM_LAYERS, ops
    assert ops.get("ascend.rms_norm", 0) >= 2 * NUM_LAYERS, ops  # at least q and k norms


def test_npugraph_ex_compiles_the_rewritten_whole_forward(graph_runs) -> None:
    """The npugraph_ex engine's backend handed every graph its passes rewrote to the emulated
    npugraph_ex (none was handed to it by the FULL_AND_PIECEWISE engine before): each is the
    whole forward with its `ascend.*` calls (the fused qk-norm + rope where the pass rewrote
    it) and the fused KV-cache write + attention of every layer, and the extension's compiled
    code ran (eager steps and the captures)."""
    before = graph_runs["qwen3"]["report"]["graph_ex"]
    assert before["compiled"] == {} and before["runs"] == 0, before
    tally = graph_runs["qwen3_npugraph_ex"]["report"]["graph_ex"]
    sites = graph_runs["qwen3_npugraph_ex"]["fusion"]["sites"]
    assert tally["compiled"] == {"npugraph_ex": sites["graphs"]}, (tally, sites["graphs"])
    assert tally["runs"] > 0 and tally["loaded"] == 0, tally
    # In bfloat16 the qk-norm + rope pass rewrites each layer's q/k norms and rope into the
    # fused op (the NPU kernel takes bfloat16, head 64); otherwise they stay.
    qknorm_fused = _npu_sites(whole_forward=True)["qknorm_rope"]["matched"] > 0
    for ops in tally["graph_ops"]:
        if qknorm_fused:
            assert ops.get("ascend.split_qkv_rmsnorm_rope") == NUM_LAYERS, ops
            assert "ascend.rotary_embedding" not in ops, ops
        else:
            assert ops.get("ascend.rotary_embedding") == NUM_LAYERS, ops
            assert ops.get("ascend.rms_norm", 0) >= 2 * NUM_LAYERS, ops
        assert ops.get(FUSED_ATTENTION_OP) == NUM_LAYERS, ops
        assert KV_UPDATE_OP not in ops and ATTENTION_OP not in ops, ops


@pytest.mark.parametrize("engine", ENGINES)
def test_the_emulated_graph_catches_a_fresh_input_buffer(graph_runs, engine) -> None:
    run = graph_runs[engine]
    expected = run["eager"]["batch_3"]
    assert run["faults"]["fresh_input"]["broken"] != expected
    assert run["faults"]["fresh_input"]["cleared"] == expected


def test_a_replay_without_its_parameter_update_waits_forever_on_its_event(
    tiny_models: Any, start_worker: Callable[..., LLMWorker]
) -> None:
    """Skipping `update_full_graph_params` also skips the `ExternalEvent` records the captured
    task groups wait on: on the device the replay never proceeds (the emulated device refuses
    the host's next wait behind it). Its own process: the device stays blocked."""
    from vllm_ascend_testing.worker_client import WorkerError

    worker = start_worker("npu-graphs-skip-update", device="npu", **EMULATED)
    model = str(tiny_models.path("llama"))
    worker.request("load", name="g", kwargs=_kwargs(model, FULL_DECODE_ONLY), timeout=600)
    assert len(_tokens(worker, "g", PROMPTS[:3])[0]) == MAX_TOKENS
    worker.request("graph_fault", name="g", fault="skip_update")
    with pytest.raises(WorkerError, match=r"waits on an ExternalEvent nothing recorded"):
        _tokens(worker, "g", PROMPTS[:3])
    worker.close()


def test_a_float32_model_gets_no_full_graph_with_one_log_line_and_eager_tokens(
    tiny_models: Any, start_worker: Callable[..., LLMWorker]
) -> None:
    """FIA takes float16/bfloat16 only; a float32 model's attention is the plain-torch
    reference, which reads the host and so may not be captured. Asked for FULL_DECODE_ONLY,
    the engine captures nothing (vLLM's mode resolution, from the backend's graph support),
    logs the reason once, and gives the eager engine's tokens (batch 3: padded in a graph)."""
    import re

    worker = start_worker("npu-graphs-float32", device="npu", **EMULATED)
    model = str(tiny_models.path("llama"))
    found = {}
    for label, graphs in (("graphs", FULL_DECODE_ONLY), ("eager", None)):
        worker.request("load", name=label, kwargs=_kwargs(model, graphs, dtype="float32"),
                       timeout=600)
        found[label] = _tokens(worker, label, PROMPTS[:3])
        if graphs is not None:
            report = worker.request("graph_report", name=label)["workers"][0]
        worker.request("unload", name=label)
    log = worker.log_path.read_text(errors="replace")
    worker.close()
    assert report["captures"] == 0 and not report["replays"], report
    lines = re.findall(r"NPU graphs: no FULL graph for this model's attention \(dtype "
                       r"torch.float32 \(FIA takes float16 or bfloat16\)\)", log)
    assert len(lines) == 1, log[-3000:]
    assert all(len(t) == MAX_TOKENS for t in found["graphs"])
    assert found["graphs"] == found["eager"]


# Graph memory before the KV cache. A tiny llama of 24 layers in bfloat16 (FULL graphs need FIA;
# the byte sizes of the 12 float32 layers the figures below were measured with; the graphs hold
# every layer's intermediates, the profile run's activations only one layer's at a time), 16
# sequences, FULL graphs of 1..16 tokens, on an emulated NPU of 80 MiB with
# --gpu-memory-utilization 0.9.
# Measured on the emulation: weights 28.5 MiB, profile-run activations 1.5 MiB, the graphs'
# estimate 13.5 MiB, and the capture itself needs 13 MiB on top of the KV cache (warm-ups and
# the 9 MiB the graphs keep). Without the estimate the KV cache leaves 8 + 1.5 MiB free, so the
# capture runs out of memory; with it, 23 MiB stay free for the capture. (The profile itself
# needs the weights, a KV cache of 16 blocks and two graphs: about 64 MiB.)
GMEM_LAYERS = 24
GMEM_HBM_GIB = str(80 / 1024)
GMEM_UTIL = 0.9
GMEM_SEQS = 16
GMEM_SIZES = [1, 2, 4, 8, 16]
# The boundary: --max-model-len 2048 needs 16 blocks + vLLM's null block of 1.5 MiB each
# (24 layers x (K, V) x 2 KV heads x 64 x 2 bytes x 128 tokens): 25.5 MiB. At
# --gpu-memory-utilization 0.78 (62.4 MiB) the KV cache gets about 19 MiB with the graphs'
# estimate and would get about 32 MiB without it.
GMEM_LONG = 2048
GMEM_LONG_MIB = 25.5
GMEM_LONG_UTIL = 0.78


def _gmem_kwargs(model: str, *, graphs: bool, max_model_len: int = 512,
                 util: float = GMEM_UTIL) -> dict[str, Any]:
    # Eager gets a fixed KV cache of 16 MiB; graph mode sizes it from the utilisation.
    kwargs = llm_kwargs(model, compile=graphs, max_model_len=max_model_len,
                        max_num_seqs=GMEM_SEQS, kv_cache_mib=None if graphs else 16,
                        dtype=DTYPE)
    compilation: dict[str, Any] = {"custom_ops": NATIVE_ROPE}
    if graphs:
        compilation.update(FULL_DECODE_ONLY, cudagraph_capture_sizes=GMEM_SIZES)
    kwargs.update(compilation_config=compilation, max_num_batched_tokens=128,
                  gpu_memory_utilization=util)
    return kwargs


def test_graph_memory_is_taken_from_the_kv_cache_before_it_is_sized(
    tmp_path_factory: Any, start_worker: Callable[..., LLMWorker]
) -> None:
    """With vLLM's graph-memory estimate (on by default) the graph engine starts on the small
    NPU and gives eager's tokens; with it off (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) the
    same engine's KV cache leaves too little for the capture, which runs out of memory. At the
    boundary (a --max-model-len whose one sequence fits the KV cache's share only without the
    graphs) the start fails before any capture, with one error naming the graphs' memory."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    from vllm_ascend.checkpoints.tiny_models import make_tiny_model
    from vllm_ascend_testing.worker_client import WorkerError

    model = str(make_tiny_model("llama", tmp_path_factory.mktemp("gmem") / "llama",
                                layers=GMEM_LAYERS))
    small = {**EMULATED, "VLLM_ASCEND_EMULATED_HBM_GIB": GMEM_HBM_GIB}
    worker = start_worker("npu-graph-memory", device="npu", **small)
    unprofiled = start_worker("npu-graph-memory-off", device="npu",
                              VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS="0", **small)

    def without_estimate() -> str:
        with pytest.raises(WorkerError) as info:
            unprofiled.request("load", name="g", kwargs=_gmem_kwargs(model, graphs=True),
                               timeout=600)
        unprofiled.close()
        return str(info.value)

    with ThreadPoolExecutor(max_workers=1) as pool:  # the two processes start side by side
        refused = pool.submit(without_estimate)
        found: dict[str, list[list[int]]] = {}
        for label in ("graphs", "eager"):
            worker.request("load", name=label, kwargs=_gmem_kwargs(model, graphs=label == "graphs"),
                           timeout=600)
            found[label] = _tokens(worker, label, PROMPTS)
            if label == "graphs":
                report = worker.request("graph_report", name=label)["workers"][0]
            worker.request("unload", name=label)
        off_message = refused.result()

    assert report["mode"] == "FULL_DECODE_ONLY"
    assert sorted(int(k) for k in report["replays"]) == GMEM_SIZES
    assert report["replays"]["8"] >= MAX_TOKENS - 1  # the 8 prompts decoded in graphs
    assert report["captures"] == len(GMEM_SIZES)  # the profile's captures are not the engine's
    assert all(len(t) == MAX_TOKENS for t in found["graphs"])
    assert found["graphs"] == found["eager"]
    log = worker.log_path.read_text(errors="replace")
    assert len(re.findall(r"NPU graphs: [\d.]+ MiB of device memory for the captured graphs",
                          log)) == 1
    _check_graph_memory_report(log)
    assert "NPU out of memory" in off_message
    assert "capture_model" in off_message  # it failed in the capture, after sizing

    # The boundary: one sequence fits the KV cache's share without the graphs, not with them.
    with pytest.raises(WorkerError) as info:
        worker.request("load", name="long", timeout=600, kwargs=_gmem_kwargs(
            model, graphs=True, max_model_len=GMEM_LONG, util=GMEM_LONG_UTIL))
    message = str(info.value)
    assert f"max_model_len={GMEM_LONG} needs {GMEM_LONG_MIB:.2f} MiB" in message
    available = re.search(r"the KV cache does not fit: ([\d.]+) MiB is available", message)
    graphs = re.search(r"the graphs it captures ([\d.]+) MiB \(profiled", message)
    assert available is not None and graphs is not None, message
    kv_share, graph_mib = float(available.group(1)), float(graphs.group(1))
    assert kv_share < GMEM_LONG_MIB <= kv_share + graph_mib
    assert "capture fewer graphs" in message
    assert "determine_available_memory" in message and "capture_model" not in message


#: One KV block of the GMEM llama: 24 layers x (K, V) x 2 KV heads x 64 x 2 bytes x 128 tokens.
GMEM_BLOCK_BYTES = 24 * 2 * 2 * 64 * 2 * 128


def _check_graph_memory_report(log: str) -> None:
    """The KV cache got its share less the per-token estimate, not less vLLM's extrapolation
    (each further graph as large as the second), and the captures fit in the estimate."""
    import re

    share = re.search(r"taken from the KV cache's share of (\d+) bytes", log)
    found = re.search(r"the captures hold .* \((\d+) bytes\); estimated before the KV cache was "
                      r"sized: .* \((\d+) bytes; vLLM's extrapolation .*, (\d+) bytes\); the KV "
                      r"cache has (\d+) blocks of (\d+) bytes", log)
    tokens = re.search(r"NPU KV cache size: ([\d,]+) tokens", log)
    assert share is not None and found is not None and tokens is not None, log[-3000:]
    kv_share = int(share.group(1))
    measured, estimate, vllm_estimate, blocks, block_bytes = map(int, found.groups())
    assert block_bytes == GMEM_BLOCK_BYTES
    assert blocks == int(tokens.group(1).replace(",", "")) // 128
    assert blocks == (kv_share - estimate) // GMEM_BLOCK_BYTES
    assert blocks > (kv_share - vllm_estimate) // GMEM_BLOCK_BYTES
    assert measured <= estimate < vllm_estimate

"""The NPU runtime end to end on the emulated `npu` device (`VLLM_ASCEND_EMULATED_NPUS`).

The platform is `NPUPlatform`, the worker `vllm_ascend.npu_runtime.worker.NPUWorker`, attention
the Ascend backend over `torch.ops.ascend.reshape_and_cache` / `paged_attention` (on the device:
torch_npu's FIA and scatter kernels as the emulation binds them). Expected tokens come from the
host-CPU platform (vLLM's CPU worker and CPU attention kernels) on the same checkpoint, each
prompt generated alone, without chunking or prefix caching: a chunked prefill (a prompt longer
than `max_num_batched_tokens`) and a prefix-cache hit (two prompts sharing three 128-token
blocks) must give the same tokens.

Both engines run with vLLM's default custom ops: on the device the rope is `npu_mrope` with each
call's own cos/sin cache (not ATB's `_npu_rotary_embedding`, whose static first-call caches and
float16/bfloat16-only rule the emulation enforces: two architectures run in one process here),
the norms torch_npu's `npu_rms_norm`/`npu_add_rms_norm`, the MLP
activation `npu_swiglu` (each validated against its recorded schema by the emulation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EMULATED = {"VLLM_ASCEND_EMULATED_NPUS": "1"}
MAX_BATCHED = 128  # the chunked prompt is longer than this
SHORT_PROMPTS = ["Hello, my name is", "The capital of France is", "The future of AI is",
                 "Once upon a time"]
MAX_TOKENS = 12
# An emulated NPU on which the tiny llama's weights and profile run fit but a 2048-token KV
# cache (4.25 MiB) does not.
KV_FIT_HBM_MIB = 16
KV_FIT_UTIL = 0.672


def _long_prompts() -> dict[str, list[int]]:
    """Token-id prompts: one of 300 tokens (3 chunks of 128), and two that share their first
    3 blocks (384 tokens) and then differ."""
    shared = [(i * 37 + 11) % 240 + 5 for i in range(384)]
    return {
        "chunked": [(i * 53 + 7) % 240 + 5 for i in range(300)],
        "prefix_a": [*shared, 17, 23, 42],
        "prefix_b": [*shared, 99, 7, 3, 64, 12],
    }


def _kwargs(model: str, **extra: Any) -> dict[str, Any]:
    kwargs = llm_kwargs(model, compile=False, max_model_len=512, kv_cache_mib=64)
    kwargs["max_num_batched_tokens"] = MAX_BATCHED
    kwargs["enable_prefix_caching"] = True
    kwargs.update(extra)
    return kwargs


def _run(worker: LLMWorker, name: str, model: str, **extra: Any) -> dict[str, list[list[int]]]:
    worker.request("load", name=name, kwargs=_kwargs(model, **extra), timeout=600)
    runs: dict[str, list[list[int]]] = {}
    answer = worker.request("generate", name=name, prompts=SHORT_PROMPTS, max_tokens=MAX_TOKENS)
    runs["short"] = [o["token_ids"] for o in answer["outputs"]]
    for key, prompt in _long_prompts().items():  # one at a time: prefix_b hits prefix_a's cache
        answer = worker.request("generate", name=name, prompts=[prompt], max_tokens=MAX_TOKENS)
        runs[key] = [answer["outputs"][0]["token_ids"]]
    platform = worker.request("platform")["class"]
    worker.request("unload", name=name)
    return {**runs, "_platform": platform}  # type: ignore[dict-item]


@pytest.fixture(scope="module")
def tiny_runs(tiny_models: Any, start_worker: Callable[..., LLMWorker]) -> dict[str, Any]:
    """Per architecture: the NPU runtime's tokens and the host-CPU platform's."""
    npu = start_worker("npu-runtime-tiny", device="npu", **EMULATED)
    cpu = start_worker("npu-runtime-cpu-reference", device="cpu", shared_inductor=True)
    found: dict[str, Any] = {}
    for arch in ("llama", "qwen3"):
        model = str(tiny_models.path(arch))
        found[arch] = {"npu": _run(npu, f"npu-{arch}", model),
                       # the reference: no chunking, no prefix cache
                       "cpu": _run(cpu, f"cpu-{arch}", model, enable_prefix_caching=False,
                                   max_num_batched_tokens=512)}
    return found


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_engine_runs_on_the_npu_platform_with_the_npu_runtime(tiny_runs, arch) -> None:
    assert tiny_runs[arch]["npu"]["_platform"] == "vllm_ascend.platform.npu.NPUPlatform"
    assert tiny_runs[arch]["cpu"]["_platform"] == "vllm_ascend.platform.cpu.AscendCpuPlatform"


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("case", ["short", "chunked", "prefix_a", "prefix_b"])
def test_npu_runtime_tokens_equal_the_host_cpu_platform(tiny_runs, arch, case) -> None:
    npu, cpu = tiny_runs[arch]["npu"][case], tiny_runs[arch]["cpu"][case]
    assert all(len(t) == MAX_TOKENS for t in npu)
    assert npu == cpu


#: A rope variant of the tiny llama: the same weights (same seed), another cos/sin cache (YaRN
#: rescales the frequencies and multiplies cos and sin by its attention factor).
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}


def test_two_bfloat16_engines_in_one_process_each_rotate_with_their_own_rope_cache(
    tiny_models: Any, tmp_path: Any, start_worker: Callable[..., LLMWorker]
) -> None:
    """Issue 43 item 4: rope is correct for any number of engines per process. Two bfloat16
    engines (the NPU kernels' dtype) run the rope custom op in one process: the tiny llama,
    then the same weights with YaRN rope scaling. Their caches differ, so the second model's
    tokens differ from the first's; a rope kernel that kept the first call's cos/sin cache
    for the process (ATB's `_npu_rotary_embedding`, emulated with its static caches) would
    rotate the second engine with the first's cache and so give exactly the first's tokens."""
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model

    plain = str(tiny_models.path("llama"))
    yarn = str(make_tiny_model("llama", tmp_path / "llama-yarn", layers=2, rope_scaling=YARN))
    worker = start_worker("npu-runtime-two-ropes", device="npu", **EMULATED)
    prompts: list[Any] = [_long_prompts()["chunked"], *SHORT_PROMPTS]
    found = {}
    for label, model in (("plain", plain), ("yarn", yarn)):
        worker.request("load", name=label, kwargs=_kwargs(model, dtype="bfloat16"), timeout=600)
        answer = worker.request("generate", name=label, prompts=prompts, max_tokens=MAX_TOKENS)
        found[label] = [o["token_ids"] for o in answer["outputs"]]
        worker.request("unload", name=label)
    assert all(len(t) == MAX_TOKENS for run in found.values() for t in run), found
    assert found["yarn"] != found["plain"], found


CHAT_QUESTIONS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Explain what a compiler does in one sentence.",
)
SMOLLM2_TOKENS = 16


@pytest.fixture(scope="module")
def smollm2_chat_ids(smollm2_dir: Any) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    return [[int(t) for t in tokenizer.apply_chat_template(
        [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
        return_dict=True)["input_ids"]] for q in CHAT_QUESTIONS]


def test_smollm2_float32_on_the_npu_runtime_gives_transformers_greedy_tokens(
    smollm2_dir: Any, smollm2_chat_ids: list[list[int]], start_worker: Callable[..., LLMWorker]
) -> None:
    """The real model (30 layers, 9 query / 3 KV heads: GQA) in float32, batched chat prompts,
    against transformers' float32 greedy decoding (EOS not special on either side)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    worker = start_worker("npu-runtime-smollm2", device="npu", **EMULATED)
    kwargs = _kwargs(str(smollm2_dir), max_num_batched_tokens=512, max_num_seqs=4)
    worker.request("load", name="smollm2", kwargs=kwargs, timeout=900)
    answer = worker.request("generate", name="smollm2", prompts=smollm2_chat_ids,
                            max_tokens=SMOLLM2_TOKENS)
    worker.close()
    engine = [o["token_ids"] for o in answer["outputs"]]
    # The engine's exit (process groups destroyed, the device cache emptied) is clean.
    assert worker.proc.returncode == 0 and "Traceback" not in worker.log_path.read_text(), \
        worker.log_tail()

    model = AutoModelForCausalLM.from_pretrained(
        str(smollm2_dir), dtype=torch.float32, attn_implementation="eager").eval()
    model.generation_config = GenerationConfig(
        do_sample=False, max_new_tokens=SMOLLM2_TOKENS, eos_token_id=None, pad_token_id=0)
    reference = []
    with torch.no_grad():
        for ids in smollm2_chat_ids:
            out = model.generate(torch.tensor([ids]),
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            reference.append(out[0, len(ids):].tolist())
    assert all(len(t) == SMOLLM2_TOKENS for t in reference)
    assert engine == reference


def test_tp2_over_two_emulated_npus_in_graph_mode_gives_tp1_tokens(
    tiny_models: Any, tiny_runs: dict[str, Any], start_worker: Callable[..., LLMWorker]
) -> None:
    """Two workers, one emulated NPU each, the hccl process group between them, float32, in
    the runtime's graph mode without compilation (FULL_DECODE_ONLY: a float32 model's attention
    gets no FULL graph, so decodes run eagerly; the bfloat16 graphs are in
    test_npu_graphs.py): TP=1's tokens with a chunked prefill and a prefix hit."""
    worker = start_worker("npu-runtime-tp2", device="npu", VLLM_ASCEND_EMULATED_NPUS="2")
    graphs = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2]}
    runs = _run(worker, "tp2", str(tiny_models.path("llama")), tensor_parallel_size=2,
                enforce_eager=False, compilation_config=graphs)
    log = worker.log_path.read_text(errors="replace")
    worker.close()
    assert runs == tiny_runs["llama"]["npu"]
    # The graph mode kept for the two ranks (it used to be NONE, "runs eagerly"); float32
    # attention then gets no FULL graph, with its one line.
    assert "NPU graphs: cudagraph_mode FULL_DECODE_ONLY, compilation mode 0" in log, log[-3000:]
    assert "NPU graphs: no FULL graph for this model's attention" in log, log[-3000:]


@pytest.mark.parametrize(("arch", "npus"), [("qwen3", 1), ("llama", 2)])
def test_serve_with_defaults_answers_the_openai_client_and_exits_cleanly(
    arch: str, npus: int, tiny_models: Any, make_env: Callable[..., dict[str, str]],
    tmp_path: Any
) -> None:
    """`vllm-ascend serve MODEL` with no memory, eager or custom-op flag (the emulated NPUs
    have the default 32 GiB; vLLM sizes the KV cache to it), alone and with `-tp 2` over two
    NPUs, both in the default graph mode: chat completions streamed and not, then a SIGINT
    stop with status 0 and no traceback in any process's output."""
    import re

    from openai import OpenAI
    from vllm_ascend_testing.serve_process import VllmServer

    env = make_env(device="npu", VLLM_ASCEND_EMULATED_NPUS=str(npus))
    env.pop("VLLM_ASCEND_EMULATED_HBM_GIB", None)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    # -tp 2 with at most 4 sequences: graphs of 1, 2 and 4 tokens (the default capture sizes
    # follow --max-num-seqs), captured on both ranks.
    args = ["--served-model-name", "tiny"] + (
        ["-tp", str(npus), "--max-num-seqs", "4"] if npus > 1 else [])
    server = VllmServer(tiny_models.path(arch), args, env, tmp_path / "serve.log")
    with server:
        server.wait_healthy(timeout=600)
        client = OpenAI(base_url=f"{server.base_url}/v1", api_key="unused")
        question = [{"role": "user", "content": "Hello"}]
        whole = client.chat.completions.create(model="tiny", messages=question,
                                               temperature=0, max_tokens=8)
        text = whole.choices[0].message.content
        assert whole.usage is not None and whole.usage.completion_tokens == 8 and text
        stream = client.chat.completions.create(model="tiny", messages=question,
                                                temperature=0, max_tokens=8, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert streamed == text
        assert "NPUPlatform" in server.log() or "device_config=npu" in server.log()
        # vLLM sized the KV cache from the emulated 32 GiB (0.92 of it, less the model).
        assert "Free memory on device (32.0/32.0 GiB) on startup" in server.log()
        # Every rank captured graphs in the default graph mode (before issue 44, -tp 2 ran
        # eagerly and logged no capture).
        modes = re.findall(r"NPU graphs: cudagraph_mode (\w+), capture sizes", server.log())
        assert len(modes) == npus and "NONE" not in modes, server.log_tail(120)
    assert server.proc.returncode == 0, server.log_tail()
    assert "Traceback" not in server.log(), server.log_tail(120)


def test_a_kv_cache_that_does_not_fit_is_one_error_with_the_advice_at_its_boundary(
    tiny_models: Any, start_worker: Callable[..., LLMWorker]
) -> None:
    """On an emulated NPU of 16 MiB (about 2/3 of it for the engine) the tiny llama's KV cache
    for --max-model-len 2048 does not fit: one error with the memory measured, needed and free
    and the flag to change. The largest --max-model-len it advises then loads and generates;
    one block more does not."""
    import re

    from vllm_ascend_testing.worker_client import WorkerError

    def small_npu(name: str) -> LLMWorker:
        return start_worker(name, device="npu", VLLM_ASCEND_EMULATED_NPUS="1",
                            VLLM_ASCEND_EMULATED_HBM_GIB=str(KV_FIT_HBM_MIB / 1024))

    # A failed engine start leaves its weights on the device, as a process that goes on after
    # it would: the refusal gets a process of its own.
    worker = small_npu("npu-runtime-kv-refused")
    model = str(tiny_models.path("llama"))

    def load(max_model_len: int) -> None:
        kwargs = llm_kwargs(model, compile=False, max_model_len=max_model_len,
                            kv_cache_mib=None, max_num_seqs=1)
        kwargs.update(max_num_batched_tokens=MAX_BATCHED, gpu_memory_utilization=KV_FIT_UTIL)
        worker.request("load", name="kv", kwargs=kwargs, timeout=600)

    with pytest.raises(WorkerError) as info:
        load(2048)
    message = str(info.value)
    for part in ("the KV cache does not fit", "measured on npu:0",
                 f"device memory {KV_FIT_HBM_MIB:.2f} MiB", "free at start",
                 f"--gpu-memory-utilization {KV_FIT_UTIL} allows",
                 "max_model_len=2048 needs 4.25 MiB",  # 16 blocks + vLLM's null block, each
                 # 2 layers x (K, V) x 2 KV heads x 64 x 4 bytes x 128 tokens = 256 KiB
                 "give the KV cache more with --gpu-memory-utilization"):
        assert part in message, part
    largest = int(re.search(r"--max-model-len (\d+) \(one sequence at a time\)",
                            message).group(1))
    assert 0 < largest < 2048 and largest % 128 == 0
    worker.close()
    worker = small_npu("npu-runtime-kv-fits")
    load(largest)
    answer = worker.request("generate", name="kv", prompts=SHORT_PROMPTS[:1], max_tokens=4)
    assert len(answer["outputs"][0]["token_ids"]) == 4
    worker.request("unload", name="kv")
    with pytest.raises(WorkerError, match="the KV cache does not fit"):
        load(largest + 128)
    worker.close()

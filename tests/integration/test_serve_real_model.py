"""`vllm-ascend serve` on the real SmolLM2 checkpoint, driven by the `openai` Python client:
chat completions through the model's chat template, streaming and not."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend_testing.serve_process import VllmServer

SERVED_NAME = "smollm2"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# float32: the model's own checkpoint dtype (vLLM's "auto" would run it in bfloat16).
# No memory option: the host-CPU platform sizes the KV cache from what the run needs.
SERVE_ARGS = ["--served-model-name", SERVED_NAME, "--dtype", "float32", "--enforce-eager",
              "--max-model-len", "512", "--max-num-seqs", "2"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def smollm2_server(
    smollm2_dir: Path, make_env: Callable[..., dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory, ascend_log_dir: str,
) -> Iterator[VllmServer]:
    env = make_env(device="cpu", shared_inductor=True)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # vllm serve runs its own engine process
    config = json.dumps({"ascend_log_path": ascend_log_dir})
    server = VllmServer(smollm2_dir, [*SERVE_ARGS, "--additional-config", config], env,
                        tmp_path_factory.mktemp("serve_smollm2") / "serve.log")
    try:
        server.wait_healthy(timeout=600)
        yield server
    finally:
        server.stop(timeout=60)


def _client(server: VllmServer) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", timeout=300, max_retries=0)


def test_serve_smollm2_answers_chat_completions_through_its_chat_template(
    smollm2_server: VllmServer, smollm2_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    client = _client(smollm2_server)
    assert [m.id for m in client.models.list().data] == [SERVED_NAME]
    reply = client.chat.completions.create(model=SERVED_NAME, messages=QUESTION,
                                           temperature=0, max_tokens=24)
    choice = reply.choices[0]
    assert "Paris" in (choice.message.content or ""), choice.message.content
    assert choice.finish_reason == "stop"  # the model ended its turn
    # The prompt the server ran is the chat template's rendering (system turn included),
    # tokenized by transformers from the same checkpoint.
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    rendered = tokenizer.apply_chat_template(QUESTION, tokenize=True, add_generation_prompt=True,
                                             return_dict=True)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == len(rendered["input_ids"])


def test_serve_smollm2_streams_the_same_greedy_answer(smollm2_server: VllmServer) -> None:
    client = _client(smollm2_server)
    whole = client.chat.completions.create(model=SERVED_NAME, messages=QUESTION,
                                           temperature=0, max_tokens=24)
    stream = client.chat.completions.create(model=SERVED_NAME, messages=QUESTION,
                                            temperature=0, max_tokens=24, stream=True)
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert len([p for p in pieces if p]) > 1  # it came in pieces
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == "stop"

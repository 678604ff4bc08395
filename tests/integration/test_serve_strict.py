"""`vllm-ascend serve` with ``forbid_compile_after_ready: true`` answers every API feature and
keeps serving: logprobs, top logprobs and prompt logprobs compile nothing after ready (the worker
warmed the sampler's compiled helper up), and a compile that still happens after ready (a user's
logits processor compiling lazily: ``CompileProbe``) is refused, runs uncompiled and fails
nothing. Through the OpenAI client against a real server process."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from vllm_ascend.worker_duties.rank_report import REPORT_DIR_ENV, read_rank_reports
from vllm_ascend_testing.serve_process import VllmServer, tiny_serve_args

SERVED_NAME = "tiny-strict"
PROMPT = "The capital of France is"
PROBE = "vllm_ascend_testing.compile_probe:CompileProbe"

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def strict_server(tiny_models, make_env: Callable[..., dict[str, str]],
                  tmp_path_factory: pytest.TempPathFactory,
                  ascend_log_dir: str) -> Iterator[tuple[VllmServer, Any]]:
    reports = tmp_path_factory.mktemp("strict_reports")
    env = make_env(device="cpu", shared_inductor=True, **{REPORT_DIR_ENV: str(reports)})
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # vllm serve runs its own engine process
    env.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    config = json.dumps({"ascend_log_path": ascend_log_dir,
                         "ascend_compilation_config": {"forbid_compile_after_ready": True}})
    args = tiny_serve_args(SERVED_NAME, "--enforce-eager", "--logits-processors", PROBE,
                           "--additional-config", config)
    server = VllmServer(tiny_models.path("qwen3"), args, env,
                        tmp_path_factory.mktemp("serve_strict") / "serve.log")
    try:
        server.wait_healthy(timeout=360)
        yield server, reports
    finally:
        server.stop(timeout=60)


def _client(server: VllmServer) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", timeout=120, max_retries=0)


def _after_ready(reports: Any) -> dict[str, Any]:
    found = read_rank_reports(reports)
    assert sorted(found) == [(0, 0)]
    after: dict[str, Any] = found[(0, 0)]["after_ready"]
    return after


def _healthy(server: VllmServer) -> bool:
    return httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200


def test_logprobs_requests_are_answered_and_compile_nothing(strict_server) -> None:
    server, reports = strict_server
    client = _client(server)
    plain = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=4,
                                      temperature=0)
    scored = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=4,
                                       temperature=0, logprobs=1,
                                       extra_body={"prompt_logprobs": 1})
    assert scored.choices[0].text == plain.choices[0].text
    logprobs = scored.choices[0].logprobs
    assert logprobs is not None and len(logprobs.token_logprobs) == 4
    assert all(lp <= 0 for lp in logprobs.token_logprobs)
    prompt_logprobs = (scored.choices[0].model_extra or {})["prompt_logprobs"]
    assert prompt_logprobs[0] is None and len(prompt_logprobs) > 1
    chat = client.chat.completions.create(
        model=SERVED_NAME, messages=[{"role": "user", "content": PROMPT}], max_tokens=3,
        temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(token.top_logprobs) == 2 for token in content)
    # Two at once (a batch of two): the warmed-up helper serves every batch size.
    batch = client.completions.create(model=SERVED_NAME, prompt=[PROMPT, "Hello"],
                                      max_tokens=3, temperature=0, logprobs=2)
    assert [len(c.logprobs.token_logprobs) for c in batch.choices] == [3, 3]
    assert _healthy(server)
    after = _after_ready(reports)
    assert after["compiles"] == 0, after


def test_a_compile_after_ready_is_refused_and_the_server_keeps_serving(strict_server) -> None:
    server, reports = strict_server
    client = _client(server)
    plain = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=4,
                                      temperature=0)
    before = _after_ready(reports)["compiles"]
    for _ in range(2):
        probed = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=4,
                                           temperature=0,
                                           extra_body={"vllm_xargs": {"compile_probe": 1}})
        assert probed.choices[0].text == plain.choices[0].text
    assert _healthy(server)
    after = _after_ready(reports)
    assert after["compiles"] == before + 1, after
    refused = [line for line in server.log().splitlines()
               if "compile after the engine was ready" in line and "refused" in line]
    assert len(refused) == 1, server.log_tail()
    assert "ascend_compilation_config.forbid_compile_after_ready is true" in refused[0]
    again = client.completions.create(model=SERVED_NAME, prompt=PROMPT, max_tokens=4,
                                      temperature=0)
    assert again.choices[0].text == plain.choices[0].text

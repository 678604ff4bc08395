"""The load library of the serve tests and benchmark: requests built, answers read and judged,
figures summarized; `run_load` against an in-memory HTTP transport (no server)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from vllm_ascend_testing.serve_load import (
    PATHS,
    PROMPTS,
    LoadRequest,
    LoadResult,
    add_chunk,
    build_load,
    load_problems,
    percentile,
    read_answer,
    run_load,
    summarize,
)

# --- build_load ---------------------------------------------------------------------------


def test_build_load_mixes_apis_streaming_prompts_and_lengths() -> None:
    requests = build_load(300, max_tokens=(4, 8, 16))
    assert sorted(r.index for r in requests) == list(range(300))
    assert Counter((r.api, r.stream) for r in requests) == {
        ("completion", False): 75, ("completion", True): 75, ("chat", False): 75,
        ("chat", True): 75,
    }
    assert {r.prompt for r in requests} == set(PROMPTS)
    assert {r.max_tokens for r in requests} == {4, 8, 16}
    groups: dict[tuple[str, str, int], list[bool]] = {}
    for r in requests:
        groups.setdefault(r.group, []).append(r.stream)
    # 2 APIs x 6 prompts x 3 lengths, each sent streamed and not.
    assert len(groups) == 36
    assert all(set(streams) == {False, True} for streams in groups.values())


def test_build_load_is_deterministic_and_shuffled_by_seed() -> None:
    first, again, other = build_load(50), build_load(50), build_load(50, seed=1)
    assert first == again
    assert [r.index for r in first] != sorted(r.index for r in first)
    assert [r.index for r in other] != [r.index for r in first]
    assert sorted(other, key=lambda r: r.index) == sorted(first, key=lambda r: r.index)


def test_build_load_boundaries() -> None:
    assert [r.max_tokens for r in build_load(1, max_tokens=(1,))] == [1]
    with pytest.raises(ValueError, match="count=0 must be >= 1"):
        build_load(0)
    with pytest.raises(ValueError, match=r"max_tokens=\[4, 0\] must be non-empty, each >= 1"):
        build_load(4, max_tokens=(4, 0))
    with pytest.raises(ValueError, match="max_tokens=\\[\\] must be non-empty"):
        build_load(4, max_tokens=())
    with pytest.raises(ValueError, match="prompts must be non-empty"):
        build_load(4, prompts=())


def test_request_bodies_are_greedy_with_usage_on_streams() -> None:
    chat = LoadRequest(0, "chat", True, "Hi", 7).body("m", {"ignore_eos": True})
    assert chat == {"model": "m", "max_tokens": 7, "temperature": 0.0, "stream": True,
                    "messages": [{"role": "user", "content": "Hi"}],
                    "stream_options": {"include_usage": True}, "ignore_eos": True}
    plain = LoadRequest(1, "completion", False, "Hi", 3).body("m")
    assert plain == {"model": "m", "max_tokens": 3, "temperature": 0.0, "stream": False,
                     "prompt": "Hi"}


# --- reading answers ----------------------------------------------------------------------

USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_read_answer_of_completion_and_chat() -> None:
    result = LoadResult(LoadRequest(0, "completion", False, "p", 3))
    read_answer(result, {"choices": [{"text": "abc", "finish_reason": "length"}],
                         "usage": USAGE})
    assert (result.text, result.finish_reason, result.finish_count) == ("abc", "length", 1)
    assert (result.prompt_tokens, result.completion_tokens, result.total_tokens) == (5, 3, 8)
    chat = LoadResult(LoadRequest(0, "chat", False, "p", 3))
    read_answer(chat, {"choices": [{"message": {"role": "assistant", "content": None},
                                    "finish_reason": "stop"}], "usage": USAGE})
    assert (chat.text, chat.finish_reason) == ("", "stop")
    failed = LoadResult(LoadRequest(0, "chat", False, "p", 3))
    read_answer(failed, {"error": {"message": "boom", "code": 500}})
    assert failed.error == '{"message": "boom", "code": 500}'


def test_add_chunk_of_a_chat_stream() -> None:
    result = LoadResult(LoadRequest(0, "chat", True, "p", 3))
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"choices": [{"delta": {"content": "ab"}, "finish_reason": None}]},
        {"choices": [{"delta": {"content": "c"}, "finish_reason": "length"}]},
        {"choices": [], "usage": USAGE},
    ]
    firsts = [add_chunk(result, chunk, now_s=float(i)) for i, chunk in enumerate(chunks)]
    # Generation starts at the role chunk (sent with the first token); the first text is later.
    assert firsts == [True, False, False, False]
    assert result.ttft_s == 1.0
    assert result.chunks == 3
    assert (result.text, result.finish_reason, result.finish_count) == ("abc", "length", 1)
    assert (result.prompt_tokens, result.completion_tokens, result.total_tokens) == (5, 3, 8)


def test_add_chunk_marks_generation_started_at_a_token_without_text() -> None:
    # A random-weight model can emit tokens that decode to nothing for a long stretch.
    result = LoadResult(LoadRequest(0, "completion", True, "p", 3))
    empty = {"choices": [{"text": "", "finish_reason": None}]}
    assert add_chunk(result, empty, 0.1) is True
    assert add_chunk(result, empty, 0.2) is False
    assert add_chunk(result, {"choices": [{"text": "y", "finish_reason": None}]}, 0.3) is False
    assert (result.text, result.ttft_s, result.chunks) == ("y", 0.3, 3)


def test_add_chunk_of_a_completion_stream_and_an_error_event() -> None:
    result = LoadResult(LoadRequest(0, "completion", True, "p", 3))
    add_chunk(result, {"choices": [{"text": "x", "finish_reason": None}]}, 0.5)
    add_chunk(result, {"error": {"message": "EngineCore encountered an issue"}}, 0.7)
    assert result.text == "x" and result.ttft_s == 0.5
    assert result.error == '{"message": "EngineCore encountered an issue"}'


# --- load_problems: each kind of bad answer -----------------------------------------------


def _good(index: int, api: str = "completion", stream: bool = False, max_tokens: int = 4,
          **changes: Any) -> LoadResult:
    result = LoadResult(LoadRequest(index, api, stream, "prompt", max_tokens), status=200,
                        text="some text", finish_reason="length", finish_count=1,
                        prompt_tokens=5, completion_tokens=max_tokens,
                        total_tokens=5 + max_tokens, latency_s=1.0)
    return replace(result, **changes)


def _pair(**changes: Any) -> list[LoadResult]:
    """A streamed and a plain answer of one group; `changes` apply to the streamed one."""
    return [_good(0), _good(1, stream=True, **changes)]


def test_good_answers_have_no_problem() -> None:
    results = [*_pair(), _good(2, api="chat"), _good(3, api="chat", stream=True)]
    stop_early = [_good(4, max_tokens=8, finish_reason="stop", completion_tokens=1,
                        total_tokens=6),
                  _good(5, max_tokens=8, stream=True, finish_reason="stop", completion_tokens=1,
                        total_tokens=6)]
    assert load_problems(results + stop_early) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"status": 500, "error": "internal"}, "status 500, error internal"),
        ({"error": '{"message": "EngineCore encountered an issue"}'}, "status 200, error {"),
        ({"error": "stream ended without [DONE]"}, "error stream ended without [DONE]"),
        ({"status": None, "error": "ReadTimeout: timed out"}, "status None, error ReadTimeout"),
        ({"completion_tokens": 3, "total_tokens": 8}, "finish 'length' with 3 tokens"),
        ({"completion_tokens": 5, "total_tokens": 10}, "finish 'length' with 5 tokens"),
        ({"finish_reason": "stop", "completion_tokens": 0, "total_tokens": 5},
         "finish 'stop' with 0 tokens"),
        ({"finish_reason": "stop", "completion_tokens": 5, "total_tokens": 10},
         "finish 'stop' with 5 tokens"),
        ({"finish_reason": "stop", "completion_tokens": None}, "finish 'stop' with None tokens"),
        ({"completion_tokens": None}, "finish 'length' with None tokens"),
        ({"finish_reason": "abort"}, "finish_reason 'abort'"),
        ({"finish_reason": None, "finish_count": 0}, "finish_reason None"),
        ({"finish_count": 0}, "0 finish reasons"),
        ({"finish_count": 2}, "2 finish reasons"),
        ({"prompt_tokens": None}, "prompt_tokens None"),
        ({"total_tokens": 10}, "total_tokens 10 != prompt_tokens 5 + completion_tokens 4"),
    ],
)
def test_each_kind_of_bad_answer_is_a_problem(changes: dict[str, Any], expected: str) -> None:
    problems = load_problems(_pair(**changes))
    assert len(problems) == 1, problems
    assert problems[0].startswith("request 1 (completion, stream=True, max_tokens=4): ")
    assert expected in problems[0]


def test_stop_at_max_tokens_is_fine() -> None:
    results = [_good(0, finish_reason="stop"), _good(1, stream=True, finish_reason="stop")]
    assert load_problems(results) == []


@pytest.mark.parametrize(
    "changes",
    [{"text": "some texT"}, {"text": "some text "}, {"finish_reason": "stop"},
     {"prompt_tokens": 6, "total_tokens": 10}],
)
def test_a_group_whose_answers_differ_is_a_problem(changes: dict[str, Any]) -> None:
    problems = load_problems(_pair(**changes))
    assert len(problems) == 1, problems
    assert problems[0].startswith("completion prompt 'prompt'... max_tokens=4: 2 different "
                                  "answers over 2 requests (stream values [False, True])")


def test_failed_requests_do_not_take_part_in_the_group_comparison() -> None:
    problems = load_problems(_pair(status=500, error="x", text=""))
    assert len(problems) == 1 and "status 500" in problems[0]


# --- figures ------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q: float) -> None:
    values = [float(v) for v in np.random.default_rng(7).exponential(size=37)]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_boundaries() -> None:
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0], 50) == 1.5
    with pytest.raises(ValueError, match="percentile of no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"q=-0\.1 must be within 0\.\.100"):
        percentile([1.0], -0.1)
    with pytest.raises(ValueError, match=r"q=100\.1 must be within 0\.\.100"):
        percentile([1.0], 100.1)


def test_summarize_counts_answered_requests_only() -> None:
    answered = [_good(i, latency_s=float(i + 1)) for i in range(4)]  # latencies 1..4
    answered[1].ttft_s, answered[3].ttft_s = 0.25, 0.75
    failed = _good(9, status=500, error="x", latency_s=100.0)
    summary = summarize([*answered, failed], wall_s=2.0)
    assert summary == {
        "requests": 5.0, "answered": 4.0, "requests_per_s": 2.0,
        "output_tokens_per_s": 8.0,  # 4 answers x 4 tokens / 2 s
        "latency_p50_s": 2.5, "latency_p99_s": pytest.approx(3.97),
        "ttft_p50_s": 0.5, "ttft_p99_s": pytest.approx(0.745),
    }
    assert "ttft_p50_s" not in summarize([_good(0)], wall_s=1.0)
    with pytest.raises(ValueError, match="no request was answered"):
        summarize([failed], wall_s=1.0)
    with pytest.raises(ValueError, match="wall_s=0 must be > 0"):
        summarize(answered, wall_s=0)


# --- run_load against an in-memory server -------------------------------------------------


class FakeServer:
    """An OpenAI-style server in memory: answers "ok" x max_tokens, streamed or not; records
    the bodies and the largest number of requests in flight."""

    def __init__(self, stream_done: bool = True, status: int = 200,
                 fail: type[Exception] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak = 0
        self.stream_done, self.status, self.fail = stream_done, status, fail

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if self.fail is not None:
                raise self.fail("injected", request=request)
            return self._answer(request.url.path, body)
        finally:
            self.in_flight -= 1

    def _answer(self, path: str, body: dict[str, Any]) -> httpx.Response:
        if self.status != 200:
            return httpx.Response(self.status, json={"error": {"message": "boom"}})
        n = body["max_tokens"]
        usage = {"prompt_tokens": 2, "completion_tokens": n, "total_tokens": 2 + n}
        chat = path == PATHS["chat"]
        if not body["stream"]:
            choice: dict[str, Any] = {"finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": "ok" * n}
            else:
                choice["text"] = "ok" * n
            return httpx.Response(200, json={"choices": [choice], "usage": usage})
        events = []
        for i in range(n):
            piece = {"delta": {"content": "ok"}} if chat else {"text": "ok"}
            piece["finish_reason"] = "length" if i == n - 1 else None
            events.append({"choices": [piece]})
        events.append({"choices": [], "usage": usage})
        lines = [f"data: {json.dumps(e)}\n\n" for e in events]
        if self.stream_done:
            lines.append("data: [DONE]\n\n")
        return httpx.Response(200, content="".join(lines).encode(),
                              headers={"content-type": "text/event-stream"})


def _run(server: FakeServer, requests: list[LoadRequest], concurrency: int,
         **kwargs: Any) -> list[LoadResult]:
    transport = httpx.MockTransport(server)
    results, wall = asyncio.run(run_load("http://fake", "m", requests, concurrency,
                                         transport=transport, **kwargs))
    assert wall > 0
    return results


def test_run_load_answers_every_request_in_order_with_bounded_concurrency() -> None:
    server = FakeServer()
    requests = build_load(40, max_tokens=(1, 3))
    first = threading.Event()
    results = _run(server, requests, 3, first_token=first, extra_body={"ignore_eos": True})
    assert [r.request for r in results] == requests
    assert load_problems(results) == []
    assert server.peak == 3  # at the bound, never above
    assert first.is_set()
    assert all(body["ignore_eos"] is True for body in server.bodies)
    for r in results:
        assert r.text == "ok" * r.request.max_tokens
        assert (r.ttft_s is not None) == r.request.stream


def test_run_load_with_concurrency_one_sends_one_at_a_time() -> None:
    server = FakeServer()
    _run(server, build_load(5), 1)
    assert server.peak == 1
    with pytest.raises(ValueError, match="concurrency=0 must be >= 1"):
        _run(server, build_load(5), 0)


def test_run_load_reports_http_errors_truncated_streams_and_timeouts() -> None:
    requests = build_load(4, max_tokens=(2,))
    http_500 = _run(FakeServer(status=500), requests, 2)
    assert all(r.status == 500 and r.error and "boom" in r.error for r in http_500)
    truncated = _run(FakeServer(stream_done=False), requests, 2)
    for r in truncated:
        assert (r.error == "stream ended without [DONE]") == r.request.stream
    timeouts = _run(FakeServer(fail=httpx.ReadTimeout), requests, 2)
    assert all(r.timed_out and r.error == "ReadTimeout: injected" for r in timeouts)
    refused = _run(FakeServer(fail=httpx.ConnectError), requests, 2)
    assert all(not r.timed_out and r.error == "ConnectError: injected" for r in refused)
    assert len(load_problems(http_500 + truncated + timeouts + refused)) == 14

"""A bounded load on an OpenAI-compatible server, for tests and the `serve` benchmark.

`build_load` makes a deterministic mix of /v1/completions and /v1/chat/completions requests,
streaming and not, over several prompt lengths and `max_tokens`, every one greedy; each
(API, prompt, max_tokens) group is sent both streamed and not. `run_load` sends them with a
bounded number in flight (httpx, asyncio) and times each one; `load_problems` lists every
answer that is not a complete, consistent greedy answer; `summarize` gives the latency figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

PATHS: Final = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}

# Sentences the tiny models' tokenizer was trained on; prompts of three lengths are built from
# them (about 5, 40 and 200 tokens with that tokenizer).
_WORDS: Final = (
    "The quick brown fox jumps over the lazy dog. Hello, my name is Ascend and I run large "
    "language models on NPUs and CPUs. The capital of France is Paris. Once upon a time there "
    "was a small model that generated one token after another. "
)
PROMPTS: Final = (
    "Hello, my name is",
    "The capital of France is",
    _WORDS[:160] + "The future of AI is",
    _WORDS[60:200] + "Attention and normalization",
    _WORDS * 3 + "The answer is",
    (_WORDS * 3)[40:] + "vLLM serves completions",
)


@dataclass(frozen=True)
class LoadRequest:
    """One request of the load: which API, streamed or not, the prompt and `max_tokens`."""

    index: int
    api: str
    stream: bool
    prompt: str
    max_tokens: int

    @property
    def group(self) -> tuple[str, str, int]:
        """Requests of one group must give the same greedy answer, streamed or not."""
        return (self.api, self.prompt, self.max_tokens)

    def body(self, model: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON body; `extra` keys (e.g. ``ignore_eos``) are added last."""
        body: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens,
                                "temperature": 0.0, "stream": self.stream}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        body.update(extra or {})
        return body


@dataclass
class LoadResult:
    """What one request got back, and when (seconds from its send). `finish_count` is how
    many choice chunks carried a finish reason (a complete stream has exactly one);
    `chunks` how many streamed chunks carried a choice (generated output, text or not)."""

    request: LoadRequest
    status: int | None = None
    text: str = ""
    finish_reason: str | None = None
    finish_count: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    latency_s: float = math.nan
    ttft_s: float | None = None
    error: str | None = None
    timed_out: bool = False
    chunks: int = 0
    #: ``time.perf_counter()`` when the answer ended (complete, failed or timed out).
    ended_at: float = math.nan

    def read_usage(self, usage: Mapping[str, Any]) -> None:
        self.prompt_tokens = usage.get("prompt_tokens")
        self.completion_tokens = usage.get("completion_tokens")
        self.total_tokens = usage.get("total_tokens")


def build_load(count: int, max_tokens: Sequence[int] = (8, 32, 64), seed: int = 0,
               prompts: Sequence[str] = PROMPTS) -> list[LoadRequest]:
    """`count` requests: API x streaming vary fastest, then prompt, then `max_tokens`, so each
    group comes streamed and not; the order is shuffled with `seed` (so identical prompts
    run in different batches)."""
    if count < 1:
        raise ValueError(f"count={count} must be >= 1")
    if not max_tokens or min(max_tokens) < 1:
        raise ValueError(f"max_tokens={list(max_tokens)} must be non-empty, each >= 1")
    if not prompts:
        raise ValueError("prompts must be non-empty")
    combos = [(api, stream) for api in PATHS for stream in (False, True)]
    requests = []
    for i in range(count):
        api, stream = combos[i % len(combos)]
        step = i // len(combos)
        prompt = prompts[step % len(prompts)]
        tokens = max_tokens[(step // len(prompts)) % len(max_tokens)]
        requests.append(LoadRequest(i, api, stream, prompt, tokens))
    random.Random(seed).shuffle(requests)
    return requests


def read_answer(result: LoadResult, body: Mapping[str, Any]) -> None:
    """Fill `result` from a non-streamed answer's JSON body."""
    if "error" in body:
        result.error = json.dumps(body["error"])[:500]
        return
    choice = body["choices"][0]
    if result.request.api == "chat":
        result.text = choice["message"]["content"] or ""
    else:
        result.text = choice["text"]
    result.finish_reason = choice["finish_reason"]
    result.finish_count = int(choice["finish_reason"] is not None)
    result.read_usage(body.get("usage") or {})


def add_chunk(result: LoadResult, chunk: Mapping[str, Any], now_s: float) -> bool:
    """Add one streamed chunk (its `data:` JSON) to `result`, `now_s` seconds after the send;
    True when it is the request's first chunk of generated output.

    That first chunk may carry no text (chat's role chunk; a token that decodes to nothing, as
    a random-weight model emits for long stretches), but the server sends it only once the
    request's first token exists, so it marks the start of generation; `ttft_s` is the first
    text a user sees."""
    if "error" in chunk:
        result.error = json.dumps(chunk["error"])[:500]
        return False
    choices = chunk.get("choices") or []
    if choices:
        result.chunks += 1
    for choice in choices:
        text = choice.get("text")
        if text is None:
            text = (choice.get("delta") or {}).get("content")
        if text and result.ttft_s is None:
            result.ttft_s = now_s
        result.text += text or ""
        if choice.get("finish_reason") is not None:
            result.finish_reason = choice["finish_reason"]
            result.finish_count += 1
    if chunk.get("usage"):
        result.read_usage(chunk["usage"])
    return bool(choices) and result.chunks == 1


async def _send(client: Any, model: str, request: LoadRequest, extra: Mapping[str, Any] | None,
                first_token: threading.Event) -> LoadResult:
    result = LoadResult(request)
    start = time.perf_counter()
    path, body = PATHS[request.api], request.body(model, extra)
    if not request.stream:
        response = await client.post(path, json=body)
        result.status = response.status_code
        if response.status_code != 200:
            result.error = response.text[:500]
        else:
            read_answer(result, response.json())
    else:
        async with client.stream("POST", path, json=body) as response:
            result.status = response.status_code
            done = False
            if response.status_code != 200:
                result.error = (await response.aread()).decode(errors="replace")[:500]
            else:
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[len("data: "):]
                    if payload == "[DONE]":
                        done = True
                        break
                    if add_chunk(result, json.loads(payload), time.perf_counter() - start):
                        first_token.set()
            if not done and result.error is None:
                result.error = "stream ended without [DONE]"
    result.latency_s = time.perf_counter() - start
    result.ended_at = time.perf_counter()
    return result


async def run_load(base_url: str, model: str, requests: Sequence[LoadRequest], concurrency: int,
                   *, timeout: float = 300.0, first_token: threading.Event | None = None,
                   extra_body: Mapping[str, Any] | None = None, transport: Any = None,
                   ) -> tuple[list[LoadResult], float]:
    """Send `requests` with at most `concurrency` in flight; (results in request order, wall
    seconds). A request that fails (HTTP error, stream error event, transport error, no
    answer within `timeout` seconds: `timed_out`) has `error` set. `first_token` is set at
    the first streamed token of any request (its text may be empty); `extra_body` goes into
    every body; `transport` replaces httpx's network transport (tests)."""
    import httpx

    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency} must be >= 1")
    gate = asyncio.Semaphore(concurrency)
    seen = first_token if first_token is not None else threading.Event()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits,
                                 transport=transport) as client:

        async def one(request: LoadRequest) -> LoadResult:
            async with gate:
                start = time.perf_counter()
                try:
                    return await _send(client, model, request, extra_body, seen)
                except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError,
                        TypeError) as exc:
                    return LoadResult(request, error=f"{type(exc).__name__}: {exc}"[:500],
                                      latency_s=time.perf_counter() - start,
                                      timed_out=isinstance(exc, httpx.TimeoutException),
                                      ended_at=time.perf_counter())

        start = time.perf_counter()
        results = await asyncio.gather(*(one(r) for r in requests))
        return list(results), time.perf_counter() - start


def _answer_problems(res: LoadResult) -> list[str]:
    req = res.request
    if res.status != 200 or res.error is not None:
        return [f"status {res.status}, error {res.error}"]
    problems = []
    tokens = res.completion_tokens
    if res.finish_reason == "length":
        if tokens != req.max_tokens:
            problems.append(f"finish 'length' with {tokens} tokens")
    elif res.finish_reason == "stop":
        if tokens is None or not 1 <= tokens <= req.max_tokens:
            problems.append(f"finish 'stop' with {tokens} tokens")
    else:
        problems.append(f"finish_reason {res.finish_reason!r}")
    if res.finish_reason is not None and res.finish_count != 1:
        problems.append(f"{res.finish_count} finish reasons")
    if res.prompt_tokens is None or res.prompt_tokens < 1:
        problems.append(f"prompt_tokens {res.prompt_tokens}")
    elif tokens is not None and res.total_tokens != res.prompt_tokens + tokens:
        problems.append(f"total_tokens {res.total_tokens} != prompt_tokens "
                        f"{res.prompt_tokens} + completion_tokens {tokens}")
    return problems


def load_problems(results: Sequence[LoadResult]) -> list[str]:
    """Every way the answers fall short, one line each: not HTTP 200 or an error (HTTP, stream
    event, transport, truncated stream); a finish reason other than "length" with exactly
    `max_tokens` tokens or "stop" with 1..`max_tokens`; not exactly one finish reason; usage
    missing or total != prompt + completion; among the answers without such a problem, a
    group whose answers (text, finish reason, usage; streamed and not) differ."""
    problems = []
    groups: dict[tuple[str, str, int], list[LoadResult]] = {}
    for res in results:
        req = res.request
        found = _answer_problems(res)
        name = f"request {req.index} ({req.api}, stream={req.stream}, max_tokens={req.max_tokens})"
        problems += [f"{name}: {problem}" for problem in found]
        if not found:  # a bad answer is reported once, not again as a group mismatch
            groups.setdefault(req.group, []).append(res)
    for (api, prompt, max_tokens), members in groups.items():
        answers = {(m.text, m.finish_reason, m.prompt_tokens, m.completion_tokens)
                   for m in members}
        if len(answers) > 1:
            streams = sorted({m.request.stream for m in members})
            problems.append(f"{api} prompt {prompt[:30]!r}... max_tokens={max_tokens}: "
                            f"{len(answers)} different answers over {len(members)} requests "
                            f"(stream values {streams}): {sorted(answers, key=repr)[:3]}")
    return problems


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) with linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q={q} must be within 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(results: Sequence[LoadResult], wall_s: float) -> dict[str, float]:
    """Requests/s, output tokens/s, p50/p99 latency (all answered requests) and time to first
    token (answered streams), in seconds."""
    if wall_s <= 0:
        raise ValueError(f"wall_s={wall_s} must be > 0")
    answered = [r for r in results if r.error is None and r.status == 200]
    if not answered:
        raise ValueError("no request was answered")
    latencies = [r.latency_s for r in answered]
    ttfts = [r.ttft_s for r in answered if r.ttft_s is not None]
    tokens = sum(r.completion_tokens or 0 for r in answered)
    summary = {
        "requests": float(len(results)),
        "answered": float(len(answered)),
        "requests_per_s": len(answered) / wall_s,
        "output_tokens_per_s": tokens / wall_s,
        "latency_p50_s": percentile(latencies, 50),
        "latency_p99_s": percentile(latencies, 99),
    }
    if ttfts:
        summary["ttft_p50_s"] = percentile(ttfts, 50)
        summary["ttft_p99_s"] = percentile(ttfts, 99)
    return summary

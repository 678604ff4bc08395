"""A KV cache that does not fit, through `vllm.LLM` on the host-CPU platform: one error with
the memory measured, the model's needs and the largest settings that fit (no negative sizes)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs

SNIPPET = """
import json, sys
from vllm import LLM
try:
    LLM(**json.loads(sys.argv[1]))
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
"""


def test_too_small_kv_cache_is_one_advising_error(tiny_models: Any, tmp_path: Any) -> None:
    model = str(tiny_models.path("qwen3"))
    kwargs = llm_kwargs(model, compile=False, max_model_len=512, max_num_seqs=4,
                        kv_cache_mib=None)
    kwargs["block_size"] = 128
    # The tiny qwen3 (float32, 2 layers, 2 KV heads of 64): 2 * 2 * 2 * 64 * 4 B = 2 KiB a
    # token, 256 KiB a block of 128. 768 KiB = 3 blocks, one of them vLLM's null block: 256
    # tokens fit, a 512-token sequence (1 MiB with the null block: 1.25 MiB) does not.
    kwargs["kv_cache_memory_bytes"] = 768 * 1024
    proc = subprocess.run([sys.executable, "-c", SNIPPET, json.dumps(kwargs)],
                          env=engine_env(device="cpu", cache_root=tmp_path),
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    result = json.loads(lines[-1])
    message = result["message"]
    assert result["type"] == "KvCacheMemoryError", message
    assert "768.0 KiB is available for it (the KV cache was given 768.0 KiB;" in message
    assert "The model needs 2.0 KiB per token" in message
    assert "one sequence of max_model_len=512 needs 1.25 MiB" in message
    assert "max_num_seqs=4 such sequences need 4.25 MiB" in message
    assert "Largest that fit: --max-model-len 256 (one sequence at a time)." in message
    assert not re.search(r"-\d", message)

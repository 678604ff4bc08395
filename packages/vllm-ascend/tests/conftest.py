"""Shared fixtures: a tiny local Qwen3 model directory and subprocess helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PKG_ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = Path(__file__).resolve().parent


def write_tiny_qwen3(path: Path, *, layers: int = 2, with_weights: bool = False) -> Path:
    """config.json + a word-level tokenizer (no network); weights only when asked."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config

    path.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(509)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(path)
    config = Qwen3Config(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=512, tie_word_embeddings=False, torch_dtype="float32",
        bos_token_id=1, eos_token_id=2,
    )
    config.save_pretrained(path)
    if with_weights:
        import torch
        from transformers import Qwen3ForCausalLM

        torch.manual_seed(0)
        Qwen3ForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "qwen3")


def base_env(tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for a vLLM subprocess: offline, in-process engine, small KV cache."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
        PYTHONPYCACHEPREFIX="/tmp/pycache", VLLM_CACHE_ROOT=str(tmp / "vllm_cache"),
        HOME=str(tmp / "home"), XDG_CONFIG_HOME=str(tmp / "xdg"), VLLM_LOGGING_LEVEL="WARNING",
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("VLLM_ASCEND_WORKER_CONFIG_INPUTS", None)
    env.update(extra)
    return env


def run_python(code: str, env: dict[str, str], timeout: float = 300) -> dict:
    """Run ``code`` in a fresh interpreter; it must print one JSON line starting with 'RESULT '."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
        text=True, timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"subprocess failed (rc={proc.returncode})\nstdout:\n{proc.stdout[-4000:]}\n"
            f"stderr:\n{proc.stderr[-6000:]}"
        )
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture
def py_runner():
    return run_python


@pytest.fixture
def make_env():
    return base_env

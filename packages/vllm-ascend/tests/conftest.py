"""Shared fixtures: a tiny local Qwen3 model directory and subprocess helpers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from torch_npu_double.seam.fixtures import fake_torch_npu  # noqa: F401 - the one NPU seam

PKG_ROOT = Path(__file__).resolve().parents[1]
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="vllm_ascend_tests_"))


def pytest_configure(config: pytest.Config) -> None:
    """vLLM caches its platform per process: this suite runs in-process tests on the Ascend
    host-CPU platform, offline, with an in-process engine and throwaway caches/homes."""
    os.environ["HOME"] = str(_SESSION_DIR / "home")  # log files and caches stay out of ~
    for key, value in {
        "VLLM_ASCEND_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(_SESSION_DIR / "vllm_cache"),
        "XDG_CONFIG_HOME": str(_SESSION_DIR / "xdg"),
        # No pool of inductor compile workers: about 1 GiB each and no speed on 2 cores.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }.items():
        os.environ.setdefault(key, value)


@pytest.fixture(autouse=True)
def _restore_environ() -> Iterator[None]:
    """The platform pipeline writes ``os.environ`` (allocator options, published worker
    inputs), as it must in a real process; no test may leak that into the next one."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _fresh_process_setup() -> Iterator[None]:
    """Each test sees the process setup of a fresh process (a worker hook run by one test
    records binding lines the next would otherwise read)."""
    from vllm_ascend.engine.registry import reset_engines
    from vllm_ascend.process.process_setup import reset_process_setup

    reset_process_setup()
    reset_engines()
    yield
    reset_process_setup()
    reset_engines()  # closes the engines' ready watches: their Dynamo callbacks are per process


TESTS_DIR = Path(__file__).resolve().parent


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _logged(name: str) -> Iterator[list[str]]:
    logger, handler = logging.getLogger(name), _Messages()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def logged() -> Callable[[str], contextlib.AbstractContextManager[list[str]]]:
    """``with logged(name) as lines``: the messages logged on logger ``name`` meanwhile, every
    level (the vllm_ascend loggers do not propagate to caplog)."""
    return _logged


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
        bos_token_id=1, eos_token_id=2, architectures=["Qwen3ForCausalLM"],
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


@pytest.fixture(scope="session")
def tiny_qwen3_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3 with seeded random weights saved (for generation tests)."""
    return write_tiny_qwen3(tmp_path_factory.mktemp("tiny_w") / "qwen3", with_weights=True)


@pytest.fixture(scope="session")
def ascend_cpu_platform():
    """vLLM's current platform, which must be the Ascend host-CPU platform in this session."""
    from vllm.platforms import current_platform
    from vllm_ascend.platform.cpu import AscendCpuPlatform

    assert isinstance(current_platform, AscendCpuPlatform), type(current_platform)
    return current_platform


@pytest.fixture
def make_engine() -> Callable[..., Any]:
    """An engine as the registry builds it for a SoC (no VllmConfig behind it)."""
    def build(soc: str, additional: dict[str, Any] | None = None) -> Any:
        import ascend_config
        from vllm_ascend.engine import AscendEngine

        facts = ascend_config.DeploymentFacts(soc=soc)
        config = ascend_config.resolve(additional or {}, facts=facts, environ={})
        return AscendEngine(config, soc, facts, lambda: None)

    return build


@pytest.fixture
def make_vllm_config(tiny_qwen3, ascend_cpu_platform):
    """Build a real VllmConfig for the tiny model through the active platform."""

    def build(**kwargs):
        from vllm.engine.arg_utils import EngineArgs

        args = {"model": str(tiny_qwen3), "load_format": "dummy", "dtype": "float32",
                "max_model_len": 256, **kwargs}
        return EngineArgs(**args).create_engine_config()

    return build


@pytest.fixture
def py_runner():
    return run_python


@pytest.fixture
def make_env():
    return base_env

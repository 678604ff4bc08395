"""The tiny-model factory: deterministic, loadable offline, a chat template, clear errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from vllm_ascend.checkpoints.tiny_models import CHAT_TEMPLATE, make_tiny_model


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_same_seed_same_files_other_seed_other_weights(tmp_path: Path) -> None:
    first = make_tiny_model("qwen3", tmp_path / "a", layers=1, hidden=64, head_dim=32)
    second = make_tiny_model("qwen3", tmp_path / "b", layers=1, hidden=64, head_dim=32)
    other = make_tiny_model("qwen3", tmp_path / "c", layers=1, hidden=64, head_dim=32, seed=1)
    assert _digest(first) == _digest(second)
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    assert _digest(first) != _digest(other)


@pytest.mark.parametrize(
    ("arch", "model_type", "architecture"),
    [
        ("llama", "llama", "LlamaForCausalLM"),
        ("qwen3", "qwen3", "Qwen3ForCausalLM"),
        ("qwen3_moe", "qwen3_moe", "Qwen3MoeForCausalLM"),
    ],
)
def test_config_describes_the_requested_shape(
    tmp_path: Path, arch: str, model_type: str, architecture: str
) -> None:
    path = make_tiny_model(arch, tmp_path, layers=3, hidden=128, heads=4, kv_heads=2, head_dim=32)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == model_type
    assert config["architectures"] == [architecture]
    assert (config["num_hidden_layers"], config["hidden_size"]) == (3, 128)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["head_dim"] == 32
    if arch == "qwen3_moe":
        from transformers import AutoConfig

        loaded = AutoConfig.from_pretrained(path)  # maps num_experts as vLLM reads it
        assert (loaded.num_experts, loaded.num_experts_per_tok) == (4, 2)


def test_tokenizer_loads_with_autotokenizer_and_renders_chat(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    path = make_tiny_model("llama", tmp_path, layers=1, hidden=64, head_dim=32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    config = AutoConfig.from_pretrained(path)
    assert len(tokenizer) == config.vocab_size
    ids = tokenizer("Hello, my name is")["input_ids"]
    assert tokenizer.decode(ids) == "Hello, my name is"
    assert tokenizer.eos_token_id == config.eos_token_id == 0
    assert tokenizer.chat_template == CHAT_TEMPLATE
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"arch": "gpt2"}, "allowed: llama, qwen3, qwen3_moe"),
        ({"head_dim": 16}, "head_dim=16 must be even and >= 32"),
        ({"heads": 6, "kv_heads": 4}, "heads=6 must be a multiple of kv_heads=4"),
        ({"layers": 0}, "layers=0 must be >= 1"),
        ({"dtype": "int8"}, "allowed: float32, bfloat16, float16"),
    ],
)
def test_bad_arguments_name_the_problem(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    args = {"arch": "qwen3", **kwargs}
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        make_tiny_model(args.pop("arch"), tmp_path, **args)
    assert not (tmp_path / "config.json").exists()


def test_building_a_model_leaves_the_callers_rng_alone(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    make_tiny_model("llama", tmp_path, layers=1, hidden=64, head_dim=32)
    assert torch.equal(torch.rand(3), expected)

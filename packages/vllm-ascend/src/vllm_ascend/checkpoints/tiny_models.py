"""Tiny random-weight models that vLLM loads offline, deterministic and downloading nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

ARCHES: Final = ("llama", "qwen3", "qwen3_moe")

EOS_TOKEN: Final = "<|endoftext|>"
IM_START: Final = "<|im_start|>"
IM_END: Final = "<|im_end|>"
SPECIAL_TOKENS: Final = (EOS_TOKEN, IM_START, IM_END)
TOKENIZER_VOCAB_SIZE: Final = 512

# ChatML, the layout Qwen models use; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Training text for the tokenizer: plain English about the things the demo prompts talk about.
TOKENIZER_CORPUS: Final = (
    "The quick brown fox jumps over the lazy dog.",
    "Hello, my name is Ascend and I run large language models on NPUs and CPUs.",
    "The capital of France is Paris. The capital of China is Beijing.",
    "The future of AI is fast inference with fused kernels and compiled graphs.",
    "A tiny model has random weights, so its answers are not meaningful, only deterministic.",
    "Once upon a time there was a small model that generated one token after another.",
    "Attention, normalization, rotary position embedding, and mixture of experts layers.",
    "vLLM serves OpenAI compatible completions and chat completions over HTTP.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: ! ? , . ; : ' \" ( ) [ ] { }",
    "user system assistant question answer prompt text token batch sequence cache memory",
)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# `rope_scaling` types the factory accepts, with the keys each needs (Hugging Face names).
ROPE_SCALING_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "linear": ("factor",),
    "dynamic": ("factor",),
}


def _check_rope_scaling(rope_scaling: Mapping[str, Any] | None) -> None:
    if rope_scaling is None:
        return
    kind = rope_scaling.get("rope_type") if isinstance(rope_scaling, Mapping) else None
    _require(
        kind in ROPE_SCALING_KEYS,
        f"rope_scaling={rope_scaling!r} needs a rope_type of: {', '.join(ROPE_SCALING_KEYS)}",
    )
    assert isinstance(rope_scaling, Mapping) and isinstance(kind, str)
    missing = [k for k in ROPE_SCALING_KEYS[kind] if k not in rope_scaling]
    _require(not missing, f"rope_scaling of type {kind!r} misses {', '.join(missing)}")


def _check_args(
    arch: str, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, dtype: str
) -> None:
    _require(arch in ARCHES, f"arch={arch!r} is not supported; allowed: {', '.join(ARCHES)}")
    _require(layers >= 1, f"layers={layers} must be >= 1")
    _require(hidden >= 1, f"hidden={hidden} must be >= 1")
    _require(heads >= 1 and kv_heads >= 1, f"heads={heads}, kv_heads={kv_heads} must be >= 1")
    _require(heads % kv_heads == 0, f"heads={heads} must be a multiple of kv_heads={kv_heads}")
    # vLLM's CPU attention backend rejects smaller heads ("Unsupported CPU attention config").
    _require(
        head_dim >= 32 and head_dim % 2 == 0,
        f"head_dim={head_dim} must be even and >= 32 (vLLM's CPU attention needs >= 32)",
    )
    allowed = ("float32", "bfloat16", "float16")
    _require(dtype in allowed, f"dtype={dtype!r} is not supported; allowed: {', '.join(allowed)}")


def build_tokenizer(path: Path) -> int:
    """Train a byte-level BPE tokenizer on a built-in corpus into `path`; its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(TOKENIZER_CORPUS), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return len(fast)


def _config_kwargs(
    arch: str,
    *,
    vocab_size: int,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    rope_scaling: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    common: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": 0,
        "pad_token_id": 0,
        "dtype": dtype,
    }
    if rope_scaling is not None:
        common["rope_scaling"] = dict(rope_scaling)
    if arch == "qwen3_moe":
        common.update(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=hidden,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
        )
    return common


def _model_class_and_config(arch: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    import transformers

    classes = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
        "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    }
    config_name, model_name = classes[arch]
    config = getattr(transformers, config_name)(**kwargs)
    config.architectures = [model_name]
    return getattr(transformers, model_name), config


def _save_quietly(model: Any, out: Path) -> None:
    """`save_pretrained` without transformers' progress bar, restoring the caller's setting."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(out))
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def make_tiny_model(
    arch: str,
    path: str | Path,
    *,
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 64,
    dtype: str = "float32",
    seed: int = 0,
    rope_scaling: Mapping[str, Any] | None = None,
) -> Path:
    """Write a tiny random-weight `arch` model (llama, qwen3, qwen3_moe) to `path`; its path.

    Deterministic from `seed`; `rope_scaling` (Hugging Face form) picks a rope variant.
    """
    _check_args(arch, layers, hidden, heads, kv_heads, head_dim, dtype)
    _check_rope_scaling(rope_scaling)
    import torch

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(out)
    kwargs = _config_kwargs(
        arch,
        vocab_size=vocab_size,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=dtype,
        rope_scaling=rope_scaling,
    )
    model_cls, config = _model_class_and_config(arch, kwargs)
    # Every weight is drawn from a private generator (weights depend on the seed only); the
    # default initialisation inside the constructor runs on a forked global RNG, so the
    # caller's RNG state is left as it was.
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        model = model_cls(config).eval()
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.dim() == 1:
                # Norm weights: around 1 so activations keep their scale.
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(0.02 * torch.randn(param.shape, generator=generator))
    model = model.to(getattr(torch, dtype))
    _save_quietly(model, out)
    generation = {"eos_token_id": 0, "pad_token_id": 0, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out

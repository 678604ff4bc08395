"""Real models as local Hugging Face checkpoints, converted once into the user's cache."""

from vllm_ascend.checkpoints.cache_entry import CheckpointError, checkpoint_cache_root
from vllm_ascend.checkpoints.smollm2 import (
    INSTALL_CONVERTER,
    INSTALL_MODEL,
    ModelPackageMissing,
    find_smollm2_gguf,
    smollm2_checkpoint,
)

__all__ = [
    "INSTALL_CONVERTER",
    "INSTALL_MODEL",
    "CheckpointError",
    "ModelPackageMissing",
    "checkpoint_cache_root",
    "find_smollm2_gguf",
    "smollm2_checkpoint",
]

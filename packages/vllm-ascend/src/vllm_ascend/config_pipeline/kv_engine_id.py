"""Step 3b (NPU platform): a kv-transfer engine id unique to this engine.

PD deployments often start every instance from the same ``--kv-transfer-config`` JSON, so a
user-given ``engine_id`` would be shared; the Ascend connectors need one id per engine. A
``-<uuid4 hex>`` suffix is appended once per KVTransferConfig object: the id it produced is
recorded on that object, so running the pipeline again on the same (or a copied) config never
appends a second suffix.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

logger = logging.getLogger("vllm_ascend.config_pipeline.kv_engine_id")

_MARK = "_ascend_suffixed_engine_id"


def suffixed_engine_id(engine_id: str, suffix: str | None = None) -> str:
    """``engine_id`` + ``-`` + 32 lowercase hex digits (a fresh uuid4 unless given)."""
    return f"{engine_id}-{suffix or uuid.uuid4().hex}"


def make_engine_id_unique(vllm_config: Any) -> str | None:
    """Append the suffix to ``kv_transfer_config.engine_id`` once; returns the new id, or None
    when there is no kv transfer or the id was already made unique."""
    kv = vllm_config.kv_transfer_config
    if kv is None or kv.engine_id is None:
        return None
    if getattr(kv, _MARK, None) == kv.engine_id:
        return None
    new_id = suffixed_engine_id(str(kv.engine_id))
    logger.info("kv_transfer_config.engine_id %r -> %r (unique per engine)", kv.engine_id, new_id)
    kv.engine_id = new_id
    setattr(kv, _MARK, new_id)
    return new_id

"""One object per engine and one road to it: :class:`AscendEngine`, :func:`engine_of`."""

from vllm_ascend.engine.ascend_engine import AscendEngine
from vllm_ascend.engine.registry import engine_of

__all__ = ["AscendEngine", "engine_of"]

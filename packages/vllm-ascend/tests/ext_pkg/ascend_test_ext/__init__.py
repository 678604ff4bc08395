"""A stand-in runtime package providing each vllm-ascend extension group once (tests only)."""

from __future__ import annotations


class TestConnector:
    """Named by the vllm_ascend.connectors entry point."""


class TestModel:
    """Named by the vllm_ascend.models entry point."""


class TestScheduler:
    """Named by the vllm_ascend.schedulers entry point (recompute)."""

    def schedule(self) -> None:
        """Listed in the service-profiling symbols."""


class TestWorker:
    """Named by the vllm_ascend.runtime entry point (worker)."""

    def execute_model(self) -> None:
        """Listed in the service-profiling symbols."""


class TestWorker310P:
    """Named by the vllm_ascend.runtime entry point (worker_310p)."""


class TestXliteWorker:
    """Named by the vllm_ascend.runtime entry point (worker_xlite)."""


class TestMLABackend:
    """The "mla" attention variant of ATTENTION_BACKENDS."""


# Named by the vllm_ascend.runtime entry point (attention): a mapping variant -> class path.
# "standard" stays TestWorker, the class every other runtime key names.
ATTENTION_BACKENDS = {
    "standard": "ascend_test_ext.TestWorker",
    "mla": "ascend_test_ext.TestMLABackend",
}


def make_loader_class() -> type:
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class TestLoader(BaseModelLoader):
        def download_model(self, model_config: object) -> None:
            return None

        def load_weights(self, model: object, model_config: object) -> None:
            return None

    return TestLoader


REGISTERED_SPECS: list[object] = []


def register_kv_cache_specs(vllm_config: object) -> None:
    """Named by the vllm_ascend.runtime entry point (kv_cache_specs)."""
    REGISTERED_SPECS.append(vllm_config)

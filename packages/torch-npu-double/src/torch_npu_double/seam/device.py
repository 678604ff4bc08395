"""Fake ``torch_npu.npu``: device, stream, graph and memory APIs bound to the real signatures.

Every API is a plain fake whose call is first bound against the signature recorded from the
wheel (``inspect.Signature.bind``), so a wrong argument name or count raises ``TypeError`` as
the real function would. Calls are recorded in :attr:`FakeNpuApi.calls` as
``(name, bound arguments)``.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

from torch_npu_double.record import signature_from_text


class FakeStream:
    """A stream: ``synchronize()`` (checked against ``Stream.synchronize``) is counted."""

    def __init__(self, api: FakeNpuApi, device: Any = None, priority: int = 0) -> None:
        self._api = api
        self.device = device
        self.priority = priority
        self.synchronized = 0

    def synchronize(self, *args: Any, **kwargs: Any) -> None:
        self._api._bind("Stream.synchronize", args, kwargs)
        self.synchronized += 1


class FakeNPUGraph:
    """``torch.npu.NPUGraph``: capture begin/end and replays are counted."""

    def __init__(self, api: FakeNpuApi) -> None:
        self._api = api
        self.capturing = False
        self.captures = 0
        self.replays = 0
        self.pool: Any = None

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        bound = self._api._bind("NPUGraph.capture_begin", args, kwargs)
        self.capturing, self.pool = True, bound.get("pool")

    def capture_end(self, *args: Any, **kwargs: Any) -> None:
        self._api._bind("NPUGraph.capture_end", args, kwargs)
        self.capturing = False
        self.captures += 1

    def replay(self, *args: Any, **kwargs: Any) -> None:
        self._api._bind("NPUGraph.replay", args, kwargs)
        self.replays += 1


class FakeNpuApi(types.ModuleType):
    """The fake ``torch_npu.npu`` module (also installed as ``torch.npu``).

    ``soc_id`` is what ``get_soc_version()`` returns; ``device_name`` defaults to the
    ``SocVersion`` name of that id; ``device_properties`` adds attributes to
    ``get_device_properties()`` (the real one has ``name``, ``total_memory``,
    ``cube_core_num``, ``vector_core_num``; ``uuid`` is not provable from the wheel, so it is
    only there when given).
    """

    def __init__(
        self,
        record: dict[str, Any],
        *,
        soc_id: int,
        device_count: int = 1,
        device_name: str | None = None,
        device_properties: dict[str, Any] | None = None,
        max_memory_allocated: int = 0,
    ) -> None:
        super().__init__("torch_npu.npu")
        self._signatures = {
            name: signature_from_text(entry["signature"])
            for name, entry in record["python_apis"].items()
        }
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.soc_id = soc_id
        names = {v: k for k, v in record["soc_versions"].items()}
        self.device_name = device_name or names.get(soc_id, "UnsupportedSocVersion")
        self.device_properties = {
            "name": self.device_name, "total_memory": 64 * 2**30, "cube_core_num": 24,
            "vector_core_num": 48, **(device_properties or {}),
        }  # fmt: skip
        self._device_count = device_count
        self._max_memory_allocated = max_memory_allocated
        self.current_device: Any = 0
        self._current: FakeStream | None = None
        # The record also holds the APIs only the emulated device (vllm_ascend_testing's
        # npu_emulation) implements; this fake has the ones the unit tests need.
        for name in self._signatures:
            fake = getattr(self, f"_fake_{name}", None)
            if "." not in name and fake is not None:
                setattr(self, name, self._api(name, fake))

    def _bind(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = self._signatures[name].bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"torch_npu.npu.{name}{self._signatures[name]}: {exc}") from None
        self.calls.append((name, dict(bound.arguments)))
        return dict(bound.arguments)

    def _api(self, name: str, fake: Callable[..., Any]) -> Callable[..., Any]:
        def api(*args: Any, **kwargs: Any) -> Any:
            self._bind(name, args, kwargs)
            return fake(*args, **kwargs)

        api.__name__ = api.__qualname__ = name
        return api

    def called(self, name: str) -> list[dict[str, Any]]:
        """The bound arguments of every call of API ``name``."""
        return [arguments for called, arguments in self.calls if called == name]

    # ------------------------------------------------------------ the fakes
    def _fake_get_soc_version(self) -> int:
        return self.soc_id

    def _fake_device_count(self) -> int:
        return self._device_count

    def _fake_set_device(self, device: Any) -> None:
        self.current_device = device

    def _fake_synchronize(self, device: Any = None) -> None:
        return None

    def _fake_get_device_name(self, device_name: Any = None) -> str:
        return self.device_name

    def _fake_get_device_properties(self, device_name: Any = None) -> Any:
        return types.SimpleNamespace(**self.device_properties)

    def _fake_reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def _fake_max_memory_allocated(self, device: Any = None) -> int:
        return self._max_memory_allocated

    def _fake_empty_cache(self) -> None:
        return None

    def _fake_host_empty_cache(self) -> None:
        return None

    def _fake_current_stream(self, device: Any = None) -> FakeStream:
        if self._current is None:
            self._current = FakeStream(self, device)
        return self._current

    def _fake_Stream(self, device: Any = None, priority: int = 0, **kwargs: Any) -> FakeStream:
        return FakeStream(self, device, priority)

    @contextlib.contextmanager
    def _fake_stream(self, stream: Any) -> Iterator[Any]:
        saved, self._current = self._current, stream
        try:
            yield stream
        finally:
            self._current = saved

    def _fake_graph_pool_handle(self) -> tuple[int, int]:
        return (0, len(self.called("graph_pool_handle")))

    def _fake_NPUGraph(self) -> FakeNPUGraph:
        return FakeNPUGraph(self)

    @contextlib.contextmanager
    def _fake_graph(
        self, npu_graph: FakeNPUGraph, pool: Any = None, stream: Any = None,
        auto_dispatch_capture: bool = False, capture_error_mode: str = "global",
    ) -> Iterator[None]:  # fmt: skip
        # As the real graph.__enter__: synchronize, empty the caches (looked up at call time,
        # so a caller may swap them), then begin; gc.collect only with TORCH_NPUGRAPH_GC.
        self.synchronize()
        self.empty_cache()
        self.host_empty_cache()
        npu_graph.capture_begin(*(() if pool is None else (pool,)),
                                capture_error_mode=capture_error_mode)
        try:
            yield
        finally:
            npu_graph.capture_end()

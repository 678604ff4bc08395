"""Shared fixtures: a recording fake ``torch_npu`` module (the only NPU seam in these tests)."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Iterator
from typing import Any

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend.*)
import pytest
import torch
from ascend_kernels import row_chunks


class FakeTorchNpu(types.ModuleType):
    """Stands in for torch_npu: records every kernel call and returns marker tensors.

    Output ``i`` of a kernel is filled with ``10 * kernel_number + i`` (fp8 outputs with a
    nearby e4m3-representable value, scales with a power of two) so a test can tell which
    kernel output ended up in which op output.
    """

    def __init__(self) -> None:
        super().__init__("torch_npu")
        self.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append((name, args, kwargs))

    @staticmethod
    def marker(value: float, shape: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.full(tuple(shape), value).to(dtype)

    def npu_rms_norm(self, x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> Any:
        self._record("npu_rms_norm", (x, gamma), {"epsilon": epsilon})
        return self.marker(10, x.shape, x.dtype), self.marker(11, x.shape[:-1], torch.float32)

    def npu_add_rms_norm(self, x1: Any, x2: Any, gamma: Any, epsilon: float = 1e-6) -> Any:
        self._record("npu_add_rms_norm", (x1, x2, gamma), {"epsilon": epsilon})
        return (
            self.marker(20, x1.shape, x1.dtype),
            self.marker(21, x1.shape[:-1], torch.float32),
            self.marker(22, x1.shape, x1.dtype),
        )

    def npu_quantize(self, *args: Any, **kwargs: Any) -> Any:
        self._record("npu_quantize", args, kwargs)
        return self.marker(30, args[0].shape, torch.int8)

    def npu_dynamic_quant(self, x: Any, **kwargs: Any) -> Any:
        self._record("npu_dynamic_quant", (x,), kwargs)
        return self.marker(40, x.shape, torch.int8), self.marker(41, x.shape[:-1], torch.float32)

    def npu_add_rms_norm_quant(self, x1: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("npu_add_rms_norm_quant", (x1, *args), kwargs)
        return (
            self.marker(50, x1.shape, torch.int8),
            self.marker(51, x1.shape, torch.int8),
            self.marker(52, x1.shape, x1.dtype),
        )

    def npu_add_rms_norm_dynamic_quant(self, x1: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("npu_add_rms_norm_dynamic_quant", (x1, *args), kwargs)
        return (
            self.marker(60, x1.shape, torch.int8),
            self.marker(61, x1.shape, torch.int8),
            self.marker(62, x1.shape, x1.dtype),
            self.marker(63, x1.shape[:-1], torch.float32),
            self.marker(64, x1.shape[:-1], torch.float32),
        )

    def _mx_scale(self, value: float, x: torch.Tensor) -> torch.Tensor:
        blocks = (x.shape[-1] + 31) // 32
        return self.marker(value, (*x.shape[:-1], (blocks + 1) // 2, 2), torch.float8_e8m0fnu)

    def npu_dynamic_mx_quant(self, x: Any, **kwargs: Any) -> Any:
        self._record("npu_dynamic_mx_quant", (x,), kwargs)
        return self.marker(64, x.shape, torch.float8_e4m3fn), self._mx_scale(2.0**-3, x)

    def npu_add_rms_norm_dynamic_mx_quant(self, x1: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("npu_add_rms_norm_dynamic_mx_quant", (x1, *args), kwargs)
        return (
            self.marker(80, x1.shape, torch.float8_e4m3fn),
            self.marker(81, x1.shape, x1.dtype),
            self._mx_scale(2.0**-4, x1),
        )

    def npu_rms_norm_dynamic_mx_quant(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("npu_rms_norm_dynamic_mx_quant", (x, *args), kwargs)
        return (
            self.marker(96, x.shape, torch.float8_e4m3fn),
            self._mx_scale(2.0**-5, x),
            self.marker(92, x.shape[:-1], torch.float32),
        )

    def npu_format_cast(self, weight: torch.Tensor, acl_format: int) -> torch.Tensor:
        self._record("npu_format_cast", (weight, acl_format), {})
        return weight.clone()

    def _npu_rotary_embedding(self, positions: Any, query: Any, key: Any, *args: Any) -> None:
        # The kernel rotates in place: record the inputs as they were at the call.
        self._record("_npu_rotary_embedding", (positions, query.clone(), key.clone(), *args), {})
        query.fill_(100.0)
        key.fill_(101.0)


@pytest.fixture
def fake_npu() -> FakeTorchNpu:
    """A fresh recording fake torch_npu module (not installed anywhere)."""
    return FakeTorchNpu()


@pytest.fixture
def fake_npu_on_cpu(fake_npu: FakeTorchNpu) -> Iterator[FakeTorchNpu]:
    """The fake installed as ``sys.modules["torch_npu"]`` and its kernels registered for CPU.

    CPU stands in for the NPU dispatch key so that ``torch.ops.ascend.*`` on CPU tensors runs
    the NPU adapters; teardown removes the registration and the module.
    """
    from ascend_kernels.npu_loader import npu_registration

    saved = sys.modules.get("torch_npu")
    sys.modules["torch_npu"] = fake_npu
    npu_registration.reset()
    try:
        assert npu_registration.load_if_available(dispatch_key="CPU")
        yield fake_npu
    finally:
        npu_registration.reset()
        if saved is None:
            sys.modules.pop("torch_npu", None)
        else:
            sys.modules["torch_npu"] = saved


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the reference kernels process a few rows per chunk (exercises chunk boundaries)."""
    monkeypatch.setattr(row_chunks, "CHUNK_ELEMENTS", 200)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes of ``t`` for bitwise comparison (works for float8 dtypes too)."""
    return t.contiguous().view(torch.uint8)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "child_process: runs ascend_kernels in a child interpreter, which imports the "
        "installed package (the mutation runner deselects these: they cannot see its mutants)")


@pytest.fixture
def same_bits() -> Any:
    """``same_bits(a, b)``: shapes, dtypes and every bit equal."""

    def compare(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))

    return compare


def valid_arguments(op: str, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Valid arguments of ``ascend::<op>`` by schema name (small, odd sizes, seeded)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    x, res, w, b = rand(5, 70), rand(5, 70), rand(70), rand(70)
    scale, offset = torch.tensor([0.05]), torch.tensor([1.0])
    pos = torch.tensor([0, 3, 1, 7, 2])
    cache = rand(8, 32)
    norm = {"x": x, "residual": res, "weight": w, "eps": 1e-6}
    table: dict[str, dict[str, Any]] = {
        "rms_norm": {"x": x, "weight": w, "eps": 1e-6},
        "add_rms_norm": {**norm, "bias": b},
        "quantize": {"x": x, "scale": scale, "offset": offset},
        "dynamic_quant": {"x": x},
        "add_rms_norm_quant": {
            "x": x, "residual": res, "weight": w, "scale": scale, "offset": offset,
            "eps": 1e-6, "bias": b,
        },
        "add_rms_norm_dynamic_quant": {**norm, "bias": None},
        "dynamic_mx_quant": {"x": x},
        "add_rms_norm_dynamic_mx_quant": norm,
        "rms_norm_dynamic_mx_quant": {"x": x, "weight": w, "eps": 1e-6},
        "rotary_embedding": {
            "positions": pos, "q": rand(5, 4 * 48), "k": rand(5, 2, 48), "cos_sin_cache": cache,
            "head_size": 48, "rotary_dim": 32, "is_neox": True,
        },
        "split_qkv_rmsnorm_rope": {
            "qkv": rand(5, 8 * 48), "q_weight": rand(48), "k_weight": rand(48),
            "positions": pos, "cos_sin_cache": cache, "q_size": 4 * 48, "kv_size": 2 * 48,
            "head_size": 48, "rotary_dim": 32, "is_neox": False, "eps": 1e-6,
            "q_bias": rand(48), "k_bias": rand(48),
        },
        "muls_add": {"x": x, "y": res, "scale": 0.25},
        "silu_and_mul": {"x": x},
        "mrotary_embedding": {
            "positions": torch.stack([pos, pos.flip(0), pos.roll(1)]), "q": rand(5, 4 * 48),
            "k": rand(5, 2, 48), "cos_sin_cache": cache, "head_size": 48, "rotary_dim": 32,
            "mrope_section": [8, 4, 4], "is_neox": True, "interleaved": False,
        },
        "bgmv_expand": {
            "x": rand(5, 8), "weight": rand(3, 16, 8), "indices": torch.tensor([0, 1, -1, 2, 0]),
            "y": rand(5, 40), "slice_offset": 8, "slice_size": 16,
        },
        "sgmv_expand": {
            "x": rand(5, 8), "weight": rand(3, 16, 8), "lora_indices": torch.tensor([2, 0]),
            "seq_len": torch.tensor([2, 3]), "y": rand(5, 40), "slice_offset": 24,
            "slice_size": 16,
        },
    }
    return dict(table[op])


@pytest.fixture(scope="session")
def valid_args() -> Any:
    """:func:`valid_arguments` as a fixture (test modules are imported in importlib mode)."""
    return valid_arguments

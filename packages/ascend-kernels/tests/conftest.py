"""Shared fixtures: the fake ``torch_npu`` of ``torch_npu_double.seam`` (the only NPU seam here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend.*)
import pytest
import torch
from torch_npu_double.seam import FakeTorchNpu, install


@pytest.fixture
def fake_npu(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[FakeTorchNpu]:
    """The seam's fake torch_npu (the real wheel's schemas and documented constraints;
    ``torch_npu_double/seam``), installed as ``sys.modules["torch_npu"]``; indirect parametrization
    passes ``install`` options (``{"atb": False}``)."""
    fake = install(monkeypatch, **getattr(request, "param", {}))
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def fake_npu_on_cpu(fake_npu: FakeTorchNpu) -> Iterator[FakeTorchNpu]:
    """``fake_npu`` with the NPU adapters registered for the CPU key.

    CPU stands in for the NPU dispatch key so that ``torch.ops.ascend.*`` on CPU tensors runs
    the NPU adapters; teardown removes the registration.
    """
    from ascend_kernels.npu_loader import npu_registration

    npu_registration.reset()
    try:
        assert npu_registration.load_if_available(dispatch_key="CPU")
        yield fake_npu
    finally:
        npu_registration.reset()


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
        # Sequence 0: 3 new tokens, no cache (its second block_table entry unused);
        # sequence 1: decode at KV length 6 (two blocks of 4); row 4 is padding.
        "paged_attention": {
            "query": rand(5, 4, 16), "key_cache": rand(6, 4, 2, 16),
            "value_cache": rand(6, 4, 2, 16),
            "block_table": torch.tensor([[2, 0], [5, 1]], dtype=torch.int32),
            "query_ends": [3, 4], "seq_lens": [3, 6], "scale": 0.25,
        },
        "reshape_and_cache": {
            "key": rand(5, 2, 16), "value": rand(5, 2, 16), "key_cache": rand(6, 4, 2, 16),
            "value_cache": rand(6, 4, 2, 16), "slot_mapping": torch.tensor([3, -1, 20, 7]),
        },
    }
    return dict(table[op])


@pytest.fixture(scope="session")
def valid_args() -> Any:
    """:func:`valid_arguments` as a fixture (test modules are imported in importlib mode)."""
    return valid_arguments

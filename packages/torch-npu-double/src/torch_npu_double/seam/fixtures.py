"""pytest fixtures of the seam; re-export them from a suite's conftest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from torch_npu_double.seam.fake_module import FakeTorchNpu, install


@pytest.fixture
def fake_torch_npu(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[FakeTorchNpu]:
    """The fake torch_npu installed (``sys.modules``, ``torch.npu``); indirect parametrization
    passes ``install`` options, e.g. ``@pytest.mark.parametrize("fake_torch_npu",
    [{"soc_id": 256}], indirect=True)``."""
    fake = install(monkeypatch, **getattr(request, "param", {}))
    try:
        yield fake
    finally:
        fake.close()

"""register_meta_if_necessary: a fake kernel only for ops that have none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from ascend_kernels import register_meta_if_necessary
from ascend_kernels.meta_registration import meta_registry


@pytest.fixture
def test_namespace() -> Iterator[str]:
    lib = torch.library.Library("ascend_meta_test", "DEF")
    lib.define("expand(Tensor x, Tensor y, int n) -> Tensor")
    lib.impl("expand", lambda x, y, n: y.clone(), "CPU")
    try:
        yield "ascend_meta_test"
    finally:
        meta_registry.reset()
        lib._destroy()


def test_registers_when_missing_then_skips(test_namespace: str) -> None:
    def fake(x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
        return torch.empty_like(y)

    assert register_meta_if_necessary(test_namespace, "expand", fake) is True
    out = torch.ops.ascend_meta_test.expand(
        torch.ones(2, device="meta"), torch.ones(3, 4, device="meta"), 1
    )
    assert out.shape == (3, 4) and out.device.type == "meta"
    assert register_meta_if_necessary(test_namespace, "expand", fake) is False


def test_existing_meta_kernels_are_kept() -> None:
    # ascend::bgmv_expand already has a fake (Meta) kernel from ascend_kernels.
    assert register_meta_if_necessary("ascend", "bgmv_expand", lambda *a: None) is False


def test_unknown_op_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="is not defined"):
        register_meta_if_necessary("ascend", "no_such_op", lambda: None)


def test_unknown_op_or_overload_message_names_it_exactly() -> None:
    with pytest.raises(ValueError) as info:
        register_meta_if_necessary("ascend", "no_such_op", lambda: None)
    assert str(info.value) == "operator ascend::no_such_op is not defined"
    with pytest.raises(ValueError) as info:
        register_meta_if_necessary("ascend", "rms_norm", lambda: None, overload="nope")
    assert str(info.value) == "operator ascend::rms_norm.nope is not defined"


def test_an_overload_gets_its_own_meta_kernel(test_namespace: str) -> None:
    lib = torch.library.Library(test_namespace, "FRAGMENT")
    lib.define("expand.scaled(Tensor x, Tensor y, int n, float s) -> Tensor")
    lib.impl("expand.scaled", lambda x, y, n, s: y * s, "CPU")
    try:
        def fake(x: torch.Tensor, y: torch.Tensor, n: int, s: float) -> torch.Tensor:
            return torch.empty_like(x)

        assert register_meta_if_necessary(test_namespace, "expand", fake, "scaled") is True
        assert register_meta_if_necessary(test_namespace, "expand", fake, "scaled") is False
        out = torch.ops.ascend_meta_test.expand.scaled(
            torch.ones(2, device="meta"), torch.ones(3, device="meta"), 1, 2.0
        )
        assert out.shape == (2,) and out.device.type == "meta"
        # The default overload still has none.
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(
            f"{test_namespace}::expand", "Meta"
        )
    finally:
        meta_registry.reset()
        lib._destroy()


def test_reset_removes_every_registration_of_a_namespace(test_namespace: str) -> None:
    lib = torch.library.Library(test_namespace, "FRAGMENT")
    lib.define("other(Tensor x) -> Tensor")
    try:
        assert register_meta_if_necessary(test_namespace, "expand", lambda x, y, n: y)
        assert register_meta_if_necessary(test_namespace, "other", lambda x: x)
        for op in ("expand", "other"):  # both live until reset
            assert torch._C._dispatch_has_kernel_for_dispatch_key(
                f"{test_namespace}::{op}", "Meta"
            )
        meta_registry.reset()
        for op in ("expand", "other"):
            assert not torch._C._dispatch_has_kernel_for_dispatch_key(
                f"{test_namespace}::{op}", "Meta"
            )
    finally:
        meta_registry.reset()
        lib._destroy()


def test_a_new_registry_owns_one_library_per_namespace_until_reset(test_namespace: str) -> None:
    from ascend_kernels.meta_registration import MetaRegistry

    registry = MetaRegistry()
    try:
        lib = registry.library(test_namespace)
        assert registry.library(test_namespace) is lib  # created once, then reused
        lib.impl("expand", lambda x, y, n: torch.empty_like(x), "Meta")
        out = torch.ops.ascend_meta_test.expand(
            torch.ones(4, device="meta"), torch.ones(1, device="meta"), 0
        )
        assert out.shape == (4,) and out.device.type == "meta"
        registry.reset()
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(
            f"{test_namespace}::expand", "Meta"
        )
        assert registry.library(test_namespace) is not lib  # a fresh library after reset
    finally:
        registry.reset()

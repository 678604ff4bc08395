"""``muls_add``: float32 arithmetic and one cast, the same bits on every path.

float32 equals eager ``x * s + y`` bit for bit; bfloat16/float16 equal the single-rounding
definition and stay within the double-rounding error of eager. The one-pass C loop and the
torch chunk path agree bit for bit, special values included, whatever ``out`` aliases.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from ascend_kernels import native_loops, ops_elementwise

A = torch.ops.ascend
SHAPES = [(0, 64), (1, 32), (7, 96), (33, 70), (5, 3, 40), (1 << 20,)]
SCALES = [0.37, 0.5, 1.0 / 3.0, -2.5, 1e-3]


def _pair(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 3).to(dtype), torch.randn(*shape, generator=g).to(
        dtype
    )


def _definition(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return (x.float() * scale + y.float()).to(x.dtype)


def _ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    magnitude = torch.exp2(torch.floor(torch.log2(v.abs().clamp_min(info.tiny))))
    return info.eps * magnitude


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", SCALES)
def test_float32_equals_eager_bit_for_bit(shape: tuple[int, ...], scale: float) -> None:
    x, y = _pair(shape, torch.float32)
    assert torch.equal(A.muls_add(x, y, scale), x * scale + y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", SCALES)
def test_half_precision_rounds_once_and_stays_within_eager_rounding(
    dtype: torch.dtype, shape: tuple[int, ...], scale: float
) -> None:
    x, y = _pair(shape, dtype)
    got = A.muls_add(x, y, scale)
    assert torch.equal(got, _definition(x, y, scale))
    # Eager rounds the product to `dtype` first: off by at most half an ulp of the product,
    # plus one rounding of the result.
    eager = x * scale + y
    product = x.float() * scale
    bound = _ulp(product, dtype) / 2 + _ulp(torch.maximum(got.float().abs(), eager.float().abs()),
                                            dtype)
    assert bool(((got.float() - eager.float()).abs() <= bound).all())


@pytest.fixture
def loops(tmp_path: Path) -> native_loops.NativeLoops:
    built = native_loops.NativeLoops(tmp_path)
    if built.muls_add_bf16() is None:
        pytest.fail(f"the C loop did not build with compiler {built.compiler!r}")
    return built


def _special_values() -> tuple[torch.Tensor, torch.Tensor]:
    big = torch.finfo(torch.bfloat16).max
    tiny = torch.finfo(torch.bfloat16).tiny
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), big, -big, tiny / 4, -0.0,
                      1.0, 3.0 * 2.0**-9, 0.0, 1e-30, -7.0, big, float("inf")])
    y = torch.tensor([1.0, 1.0, 1.0, big, -big, tiny / 8, -0.0, 2.0**-8, 1.0, -0.0, 1e-30,
                      7.0, -big, -float("inf")])
    return x.bfloat16(), y.bfloat16()


@pytest.mark.parametrize("scale", [*SCALES, 2.0, -0.0, 1e30])
def test_c_loop_and_torch_path_give_the_same_bits(
    loops: native_loops.NativeLoops, scale: float
) -> None:
    loop = loops.muls_add_bf16()
    assert loop is not None
    sx, sy = _special_values()
    rx, ry = _pair((3, 1001), torch.bfloat16, seed=7)
    for x, y in ((sx, sy), (rx.reshape(-1), ry.reshape(-1))):
        native = torch.empty_like(x)
        loop(x, y, native, scale)
        chunked = ops_elementwise.muls_add_chunked_out(x, y, scale, out=torch.empty_like(x))
        nan = torch.isnan(chunked)
        assert torch.equal(torch.isnan(native), nan)
        assert torch.equal(native[~nan].view(torch.int16), chunked[~nan].view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("alias", ["fresh", "x", "y"])
def test_out_may_be_an_input(dtype: torch.dtype, alias: str) -> None:
    x, y = _pair((3, 1001), dtype, seed=3)
    expected = _definition(x, y, 0.3) if dtype != torch.float32 else x * 0.3 + y
    out = {"fresh": torch.empty_like(x), "x": x, "y": y}[alias]
    assert ops_elementwise.muls_add_out(x, y, 0.3, out=out) is out
    assert torch.equal(out, expected)


def test_non_contiguous_inputs_use_their_values() -> None:
    x, y = _pair((64, 32), torch.bfloat16, seed=5)
    got = A.muls_add(x.t(), y.t(), 0.37)
    assert torch.equal(got, _definition(x.t(), y.t(), 0.37))


def test_built_library_is_reused_by_a_new_process_view(
    loops: native_loops.NativeLoops, tmp_path: Path
) -> None:
    (library,) = tmp_path.glob("muls_add_bf16-*.so")
    record = library.with_suffix(".sha256")
    stamps = library.stat().st_mtime_ns, record.stat().st_mtime_ns
    again = native_loops.NativeLoops(tmp_path)
    assert again.muls_add_bf16() is not None
    assert list(tmp_path.glob("muls_add_bf16-*.so")) == [library]
    assert (library.stat().st_mtime_ns, record.stat().st_mtime_ns) == stamps
    # Only the library and its record: no temporary left behind.
    assert sorted(tmp_path.iterdir()) == sorted([library, record])


@pytest.mark.parametrize("compiler", [None, "/nonexistent/cc"])
def test_without_a_compiler_the_torch_path_is_used(
    tmp_path: Path, compiler: str | None, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(native_loops, "_find_compiler", lambda: compiler)
    unavailable = native_loops.NativeLoops(tmp_path / "cache")
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        assert unavailable.muls_add_bf16() is None
        assert unavailable.muls_add_bf16() is None  # one attempt, one log line
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("one-pass C loops of muls_add_bf16.c unavailable, using torch"
                              " paths: ")
    if compiler is None:
        assert message.endswith(": no C compiler (cc, gcc or clang) on PATH")
    monkeypatch.setattr(native_loops, "default_loops", lambda: unavailable)
    x, y = _pair((9, 70), torch.bfloat16)
    assert torch.equal(A.muls_add(x, y, 0.37), _definition(x, y, 0.37))


def test_unusable_cache_directory_builds_privately_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    loops = native_loops.NativeLoops(blocker / "cache")
    with caplog.at_level(logging.INFO, logger="ascend_kernels.native_loops"):
        loop = loops.muls_add_bf16()
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    message = caplog.records[0].getMessage()
    cache = blocker / "cache"
    assert message == (
        f"not using the native-loop cache {cache} ({cache} cannot be created: [Errno 20] Not a"
        f" directory: '{cache}'); building in a private temporary directory instead"
    )
    assert loop is not None
    x, y = _pair((9, 70), torch.bfloat16)
    out = torch.empty_like(x)
    loop(x, y, out, 0.37)
    assert torch.equal(out, _definition(x, y, 0.37))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("alias", ["x", "y"])
@pytest.mark.parametrize("shift", [1, 999])  # out starts inside the input: 999 or 1 shared
def test_out_partly_overlapping_an_input_is_refused(dtype: torch.dtype, alias: str,
                                                    shift: int) -> None:
    # bfloat16's one-pass loop wrote out[i] over the input's element i + shift before reading
    # it: a silently wrong result. Like the other _out ops, a partial overlap is refused.
    buf = _pair((2000,), dtype, seed=4)[0]
    other = _pair((1000,), dtype, seed=5)[1]
    inputs = {"x": (buf[:1000], other), "y": (other, buf[:1000])}[alias]
    before = buf.clone()
    with pytest.raises(ValueError, match=rf"^out must not share memory with {alias} \(only "
                                         rf"being {alias} itself is allowed\)$"):
        ops_elementwise.muls_add_out(*inputs, 0.3, out=buf[shift:shift + 1000])
    assert torch.equal(buf, before)  # refused before writing anything


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_out_right_after_an_input_in_one_buffer_is_computed(dtype: torch.dtype) -> None:
    buf = _pair((2000,), dtype, seed=6)[0]
    y = _pair((1000,), dtype, seed=7)[1]
    x, out = buf[:1000], buf[1000:]  # adjacent, not overlapping
    expected = _definition(x, y, 0.3) if dtype != torch.float32 else x * 0.3 + y
    assert ops_elementwise.muls_add_out(x, y, 0.3, out=out) is out
    assert torch.equal(out, expected)

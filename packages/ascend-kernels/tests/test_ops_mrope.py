"""``mrotary_embedding`` (vLLM's MRotaryEmbedding CustomOp).

Golden values come from Hugging Face transformers' Qwen2-VL / Qwen3-VL rotary modules (MRoPE,
sectioned and interleaved), from the rotation written out in float64 from the cache rows each
frequency takes, and from the Qwen3-VL interleaving written as vLLM writes it (strided slices),
not as the kernel's masks; the NPU adapter is driven through the recording fake ``torch_npu``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ascend_kernels.ops import mrope as ops_mrope
from ascend_kernels.registration import fake_impl
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from .random_inputs import seeded_randn
from .rope_reference import close, want_rope

A = torch.ops.ascend


# ---------------------------------------------------------------- mrotary_embedding
HEAD, HEADS, KV_HEADS, TOKENS, MAX_POS = 32, 2, 1, 5, 64


def _vllm_cache(inv_freq: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    t = torch.arange(MAX_POS, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    assert freqs.shape[1] == rotary_dim // 2
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def _hf_mrope(
    arch: str, section: list[int], positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """transformers' text rotary module and apply_rotary_pos_emb -> (q, k, vLLM cache)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
    if arch == "qwen2_vl":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (
            Qwen2VLRotaryEmbedding as Rope,
        )
        from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb

        config: Any = Qwen2VLTextConfig(
            hidden_size=HEAD * HEADS, num_attention_heads=HEADS, head_dim=HEAD,
            rope_parameters=rope,
        )
    else:
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import (
            Qwen3VLTextRotaryEmbedding as Rope,
        )
        from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

        config = Qwen3VLTextConfig(
            hidden_size=HEAD * HEADS, num_attention_heads=HEADS, head_dim=HEAD,
            rope_parameters=rope,
        )
    module = Rope(config)
    cos, sin = module(torch.zeros(1), positions[:, None, :])  # [1, T, HEAD]
    q4 = q.view(TOKENS, HEADS, HEAD).transpose(0, 1)[None]  # [1, heads, T, HEAD]
    k4 = k.view(TOKENS, KV_HEADS, HEAD).transpose(0, 1)[None]
    q_hf, k_hf = apply_rotary_pos_emb(q4, k4, cos, sin)
    back = (lambda t: t[0].transpose(0, 1).reshape(TOKENS, -1))  # noqa: E731
    return back(q_hf), back(k_hf), _vllm_cache(module.inv_freq, HEAD)


@pytest.mark.parametrize(
    ("arch", "section", "interleaved"),
    [("qwen2_vl", [4, 6, 6], False), ("qwen3_vl", [6, 5, 5], True)],
)
def test_mrope_matches_transformers_multimodal_rotary(
    arch: str, section: list[int], interleaved: bool
) -> None:
    g = torch.Generator().manual_seed(7)
    positions = torch.randint(0, MAX_POS, (3, TOKENS), generator=g)
    q = torch.randn(TOKENS, HEADS * HEAD, generator=g)
    k = torch.randn(TOKENS, KV_HEADS * HEAD, generator=g)
    q_hf, k_hf, cache = _hf_mrope(arch, section, positions, q, k)
    q_out, k_out = A.mrotary_embedding(positions, q, k, cache, HEAD, HEAD, section, True,
                                       interleaved)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    assert torch.allclose(q_out, q_hf, atol=1e-5) and torch.allclose(k_out, k_hf, atol=1e-5)
    # The other layout gives other values: the section layout really is applied.
    q_other, _ = A.mrotary_embedding(positions, q, k, cache, HEAD, HEAD, section, True,
                                     not interleaved)
    assert not torch.allclose(q_other, q_hf, atol=1e-3)


def test_mrope_with_text_positions_is_rotary_embedding() -> None:
    g = torch.Generator().manual_seed(2)
    positions = torch.randint(0, MAX_POS, (TOKENS,), generator=g)
    q = torch.randn(TOKENS, HEADS, HEAD, generator=g)
    k = torch.randn(TOKENS, KV_HEADS, HEAD, generator=g)
    cache = torch.randn(MAX_POS, 16, generator=g)
    for neox in (True, False):
        got = A.mrotary_embedding(positions, q, k, cache, HEAD, 16, [2, 3, 3], neox, False)
        want = A.rotary_embedding(positions, q, k, cache, HEAD, 16, neox)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_mrope_equal_position_rows_reduce_to_rotary_embedding() -> None:
    """When T, H and W positions agree every section reads the same cache row."""
    g = torch.Generator().manual_seed(4)
    text = torch.randint(0, MAX_POS, (TOKENS,), generator=g)
    q = torch.randn(TOKENS, HEADS * HEAD, generator=g).to(torch.bfloat16)
    k = torch.randn(TOKENS, KV_HEADS * HEAD, generator=g).to(torch.bfloat16)
    cache = torch.randn(MAX_POS, HEAD, generator=g).to(torch.bfloat16)
    for interleaved in (False, True):
        got = A.mrotary_embedding(text.expand(3, -1), q, k, cache, HEAD, HEAD, [4, 6, 6],
                                  False, interleaved)
        want = A.rotary_embedding(text, q, k, cache, HEAD, HEAD, False)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"section": [4, 6, 5]}, r"must add up to rotary_dim / 2 = 16"),
        ({"section": [8, 8]}, "3 non-negative sizes"),
        ({"positions": torch.zeros(2, TOKENS, dtype=torch.long)}, r"\[T\] or \[3, T\]"),
        ({"positions": torch.zeros(3, TOKENS)}, "positions must be an int32 or int64 tensor"),
        ({"rotary_dim": 20}, r"cos_sin_cache must be \[max_position > 0, rotary_dim=20\]"),
        ({"q": torch.zeros(TOKENS, 33)}, r"q must be \[T=5, heads \* 32\]"),
        # Positions at the cache's edge: -1 (would wrap to the last row) and MAX_POS.
        ({"positions": torch.tensor([[0] * TOKENS] * 2 + [[0, 1, 2, 3, -1]])},
         r"positions must lie in \[0, 64\) .* got values in \[-1, 3\]"),
        ({"positions": torch.tensor([[0, 1, 2, 3, MAX_POS]] * 3)},
         r"positions must lie in \[0, 64\) .* got values in \[0, 64\]"),
    ],
)
def test_mrope_bad_input(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "positions": torch.zeros(3, TOKENS, dtype=torch.long),
        "q": torch.zeros(TOKENS, HEADS * HEAD), "k": torch.zeros(TOKENS, HEAD),
        "cache": torch.zeros(MAX_POS, HEAD), "rotary_dim": HEAD, "section": [4, 6, 6],
    }  # fmt: skip
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        A.mrotary_embedding(args["positions"], args["q"], args["k"], args["cache"], HEAD,
                            args["rotary_dim"], args["section"], True, False)


def _mrope_inputs(dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    q = torch.randn(TOKENS, HEADS, HEAD).to(dtype)
    k = torch.randn(TOKENS, KV_HEADS, HEAD).to(dtype)
    return q, k, torch.randn(MAX_POS, HEAD).to(dtype), torch.randint(0, MAX_POS, (3, TOKENS))


def test_mrope_maps_to_npu_mrope_sections_and_modes(fake_npu_on_cpu: Any) -> None:
    q, k, cache, mm = _mrope_inputs()
    q_out, k_out = A.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [4, 6, 6], True, False)
    name, args, kwargs = fake_npu_on_cpu.calls[-1]
    assert name == "npu_mrope" and args[1].shape == (TOKENS, HEADS * HEAD) and args[4] == HEAD
    assert torch.equal(args[0], mm) and torch.equal(args[3], cache)
    assert torch.equal(args[1], q.reshape(TOKENS, -1))
    assert torch.equal(args[2], k.reshape(TOKENS, -1))
    assert kwargs == {"mrope_section": [4, 6, 6], "rotary_mode": "half"}
    outputs = fake_npu_on_cpu.calls[-1].outputs
    assert q_out.shape == q.shape and torch.equal(q_out.reshape(TOKENS, -1), outputs[0])
    assert torch.equal(k_out.reshape(TOKENS, -1), outputs[1])
    A.mrotary_embedding(mm[0], q, k, cache, HEAD, HEAD, [4, 6, 6], False, False)
    assert fake_npu_on_cpu.calls[-1].kwargs == {"mrope_section": [0, 0, 0],
                                                "rotary_mode": "interleave"}
    # Interleaved sections and partial rotary are not the kernel's: the reference runs.
    count = len(fake_npu_on_cpu.calls)
    got = A.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], True, True)
    partial = A.mrotary_embedding(mm, q, k, cache[:, :16], HEAD, 16, [2, 3, 3], True, False)
    assert len(fake_npu_on_cpu.calls) == count
    from ascend_kernels.ops import mrope as ops_mrope  # the reference, called directly

    want = ops_mrope.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], True, True)
    want_partial = ops_mrope.mrotary_embedding(mm, q, k, cache[:, :16], HEAD, 16, [2, 3, 3],
                                               True, False)
    assert all(map(torch.equal, got, want)) and all(map(torch.equal, partial, want_partial))
    sectioned = ops_mrope.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], True, False)
    gptj = ops_mrope.mrotary_embedding(mm, q, k, cache, HEAD, HEAD, [6, 5, 5], False, True)
    assert not torch.equal(want[0], sectioned[0]) and not torch.equal(want[0], gptj[0])


@pytest.mark.parametrize(
    ("head", "dtype", "kernel"),
    [(48, torch.bfloat16, False), (48, torch.float16, False), (48, torch.float32, True),
     (40, torch.float32, False), (64, torch.bfloat16, True)],
)
def test_mrope_rotary_sizes_npu_mrope_rejects_run_the_reference(
    fake_npu_on_cpu: Any, head: int, dtype: torch.dtype, kernel: bool
) -> None:
    # npu_mrope: rotary_dim a multiple of 32 for fp16/bf16, of 16 for float32.
    q = torch.randn(TOKENS, head).to(dtype)
    k = torch.randn(TOKENS, head).to(dtype)
    cache = torch.randn(MAX_POS, head).to(dtype)
    mm = torch.randint(0, MAX_POS, (3, TOKENS))
    section = [head // 4, head // 8, head // 2 - head // 4 - head // 8]
    got = A.mrotary_embedding(mm, q, k, cache, head, head, section, True, False)
    assert (fake_npu_on_cpu.kernels.names() == ["npu_mrope"]) is kernel
    if not kernel:
        from ascend_kernels.ops import mrope as ops_mrope

        want = ops_mrope.mrotary_embedding(mm, q, k, cache, head, head, section, True, False)
        assert all(map(torch.equal, got, want))


def test_mrope_k_shape_error_names_k(valid_args: Any) -> None:
    args = valid_args("mrotary_embedding")
    args["k"] = seeded_randn(5, 2, 40)
    with pytest.raises(ValueError, match=r"^k must be \[T=5, heads \* 48\] or \[T, heads, 48\]"):
        A.mrotary_embedding(**args)


def test_section_sum_error_states_half_as_an_integer(valid_args: Any) -> None:
    args = {**valid_args("mrotary_embedding"), "mrope_section": [8, 4, 5]}
    message = r"^mrope_section \[8, 4, 5\] must add up to rotary_dim / 2 = 16$"
    with pytest.raises(ValueError, match=message):
        A.mrotary_embedding(**args)


# ---------------------------------------------------------------- mrope sections
SEC_HEAD = 8


SEC_TOKENS = 5


def _mrope_case(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 9, (3, SEC_TOKENS), generator=g)
    q = seeded_randn(SEC_TOKENS, 2, SEC_HEAD, seed=seed)
    k = seeded_randn(SEC_TOKENS, 1, SEC_HEAD, seed=seed + 1)
    return positions, q, k, seeded_randn(9, SEC_HEAD, seed=seed + 2)


@pytest.mark.parametrize("section", [[4, 0, 0], [0, 4, 0], [0, 0, 4], [0, 2, 2], [3, 0, 1]])
def test_sections_of_size_zero_are_allowed(section: list[int]) -> None:
    positions, q, k, cache = _mrope_case(1)
    row_of_freq = [r for r, size in enumerate(section) for _ in range(size)]
    pos_of_freq = positions[row_of_freq].t()  # [T, half]
    for fn in (fake_impl("mrotary_embedding"), A.mrotary_embedding):
        q_out, k_out = fn(positions, q, k, cache, SEC_HEAD, SEC_HEAD, section, True, False)
        assert q_out.shape == q.shape and k_out.shape == k.shape
    close(q_out.double(), want_rope(q, cache, pos_of_freq, SEC_HEAD, True))
    close(k_out.double(), want_rope(k, cache, pos_of_freq, SEC_HEAD, True))


@pytest.mark.parametrize("section", [[4, 1, 0], [2, 1, 0], [-1, 3, 2]])
def test_three_row_positions_check_the_section_also_in_the_fake(section: list[int]) -> None:
    positions, q, k, cache = _mrope_case(2)
    for fn in (fake_impl("mrotary_embedding"), A.mrotary_embedding):
        with pytest.raises(ValueError, match=r"^mrope_section"):
            fn(positions, q, k, cache, SEC_HEAD, SEC_HEAD, section, True, False)


@pytest.mark.parametrize("section", [[1, 1, 1], [], [4, 0, 0]])
def test_text_positions_ignore_the_section(section: list[int]) -> None:
    positions, q, k, cache = _mrope_case(3)
    text = positions[0]
    fake_impl("mrotary_embedding")(text, q, k, cache, SEC_HEAD, SEC_HEAD, section, False, True)
    q_out, k_out = A.mrotary_embedding(text, q, k, cache, SEC_HEAD, SEC_HEAD, section, False, True)
    pos_of_freq = text[:, None].expand(SEC_TOKENS, SEC_HEAD // 2)
    close(q_out.double(), want_rope(q, cache, pos_of_freq, SEC_HEAD, False))
    close(k_out.double(), want_rope(k, cache, pos_of_freq, SEC_HEAD, False))


def _interleaved_rows(half: int, section: list[int]) -> list[int]:
    rows = [0] * half  # vLLM's apply_interleaved_rope: strided slices of rows 1 and 2
    rows[1 : 3 * section[1] : 3] = [1] * len(range(1, min(3 * section[1], half), 3))
    rows[2 : 3 * section[2] : 3] = [2] * len(range(2, min(3 * section[2], half), 3))
    return rows


INTERLEAVED = [[4, 2, 2], [6, 3, 3], [3, 4, 1], [2, 1, 5], [8, 0, 0], [0, 8, 4]]


@pytest.mark.parametrize("section", INTERLEAVED)
def test_interleaved_frequency_rows_match_the_strided_rule(section: list[int]) -> None:
    half = sum(section)
    got = ops_mrope.frequency_rows(half, section, True)
    assert got.dtype == torch.int64
    assert got.tolist() == _interleaved_rows(half, section)


@pytest.mark.parametrize("section", [[6, 3, 3], [4, 2, 2], [3, 4, 1]])
def test_interleaved_values_at_the_section_edges(section: list[int]) -> None:
    half = sum(section)
    g = torch.Generator().manual_seed(half)
    positions = torch.randint(0, 11, (3, SEC_TOKENS), generator=g)
    q = seeded_randn(SEC_TOKENS, 2 * 2 * half, seed=4)
    k = seeded_randn(SEC_TOKENS, 1, 2 * half, seed=5)
    cache = seeded_randn(11, 2 * half, seed=6)
    q_out, k_out = ops_mrope.mrotary_embedding(
        positions, q, k, cache, 2 * half, 2 * half, section, True, True
    )
    pos_of_freq = positions[_interleaved_rows(half, section)].t()
    want_q = want_rope(q.view(SEC_TOKENS, 2, 2 * half), cache, pos_of_freq, 2 * half, True)
    close(q_out.double(), want_q.view(SEC_TOKENS, -1))
    close(k_out.double(), want_rope(k, cache, pos_of_freq, 2 * half, True))


# ---------------------------------------------------------------- chunking
class _SameDevice(TorchFunctionMode):
    """Fails any torch call that mixes tensor devices, as an accelerator would (the mrope
    reference also runs on the NPU, for interleaved sections and partial rotary)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        leaves = pytree.tree_leaves((args, kwargs))
        devices = {t.device for t in leaves if isinstance(t, torch.Tensor)}
        assert len(devices) <= 1, f"{func} mixes devices {devices}"
        return func(*args, **kwargs)


def test_mrope_reference_keeps_every_tensor_on_the_input_device() -> None:
    positions, q, k, cache = (t.to("meta") for t in _mrope_case(7))
    with _SameDevice():
        q_out, k_out = ops_mrope.mrotary_embedding(
            positions, q, k, cache, SEC_HEAD, SEC_HEAD, [2, 1, 1], True, False
        )
    assert q_out.device.type == "meta" and k_out.device.type == "meta"

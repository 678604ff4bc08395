"""DeepSeek V4 layer-name helpers (upstream plugin's semantics, boundary cases written out)."""

from __future__ import annotations

import types

import pytest
from vllm_ascend.models.deepseek_v4 import (
    extract_dsv4_layer_index,
    get_dsv4_compress_ratio,
    get_dsv4_spec_layer_idx_from_weight_name,
)

CONFIG = types.SimpleNamespace(num_hidden_layers=61, compress_ratios=[0, 4, 128, 4] + [4] * 57)


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("model.layers.0.self_attn", 0),
        ("model.layers.60.mlp.experts", 60),
        ("model.mtp.0.self_attn", 61),  # MTP layers come after the 61 main layers
        ("model.mtp.1.attn.compressor", 62),
        ("model.mtp.60.attn", 121),  # just below num_hidden_layers: shifted
        ("model.mtp.61.attn", 61),  # already past the main layers: kept
        ("model.mtp.62.attn", 62),
        ("mtp.0.attn", 0),  # no ".mtp." in a bare weight-style name
        ("3.self_attn", 3),
    ],
)
def test_extract_dsv4_layer_index(name: str, index: int) -> None:
    assert extract_dsv4_layer_index(CONFIG, name) == index


@pytest.mark.parametrize("name", ["model.norm", "model.mtp.0.layers.1.attn", "lm_head"])
def test_layer_names_need_exactly_one_number(name: str) -> None:
    with pytest.raises(ValueError, match="exactly one integer part"):
        extract_dsv4_layer_index(CONFIG, name)


def test_layer_index_needs_num_hidden_layers() -> None:
    with pytest.raises(ValueError, match="needs num_hidden_layers"):
        extract_dsv4_layer_index(types.SimpleNamespace(), "model.layers.0.attn")


@pytest.mark.parametrize(
    ("weight", "expected"),
    [("mtp.0.emb.tok_emb.weight", 0), ("mtp.2.ffn.w1.weight", 2),
     ("model.layers.3.attn.wq.weight", None), ("embed.weight", None),
     ("model.mtp.1.norm.weight", None)],  # only names that start with "mtp."
)
def test_spec_layer_index_from_weight_name(weight: str, expected: int | None) -> None:
    assert get_dsv4_spec_layer_idx_from_weight_name(CONFIG, weight) == expected


def test_malformed_mtp_weight_name_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"'mtp\.<layer number>\.…', got 'head'"):
        get_dsv4_spec_layer_idx_from_weight_name(CONFIG, "mtp.head.weight")


@pytest.mark.parametrize(
    ("idx", "ratio"),
    [(0, 0), (1, 4), (2, 128), (60, 4),  # the last listed layer
     (61, 0), (62, 0)],  # past the end: MTP layers are dense
)
def test_compress_ratio(idx: int, ratio: int) -> None:
    assert get_dsv4_compress_ratio(CONFIG, idx) == ratio


def test_compress_ratio_without_the_attribute_and_bad_indices() -> None:
    assert get_dsv4_compress_ratio(types.SimpleNamespace(num_hidden_layers=2), 0) == 0
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError, match="non-negative int"):
            get_dsv4_compress_ratio(CONFIG, bad)  # type: ignore[arg-type]

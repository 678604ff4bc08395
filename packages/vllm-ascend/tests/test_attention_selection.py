"""Attention backend selection on the NPU platform: the pure decision and the runtime lookup."""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path

import pytest
from vllm_ascend.base import attention_selection as sel

EXT_DIR = Path(__file__).resolve().parent / "ext_pkg"
FLAG_ROWS = list(itertools.product((False, True), repeat=3))
EXPECTED = {
    (False, False, False): "standard",
    (True, False, False): "mla",
    (True, True, False): "sfa",
    (True, False, True): "dsa",
}


def _select(flags: tuple[bool, bool, bool], soc: str = "A2", fa3: bool = False) -> str:
    mla, sparse, compress = flags
    return sel.select_attention_variant(use_mla=mla, use_sparse=sparse, use_compress=compress,
                                        soc=soc, fa3_requested=fa3)


@pytest.mark.parametrize("soc", ["A2", "A3", "A5"])
@pytest.mark.parametrize("flags", FLAG_ROWS)
def test_every_row_of_the_decision_table(flags, soc) -> None:
    if flags in EXPECTED:
        assert _select(flags, soc) == EXPECTED[flags]
        return
    mla, sparse, compress = flags
    with pytest.raises(ValueError) as err:
        _select(flags, soc)
    message = str(err.value)
    assert f"use_mla={mla}, use_sparse={sparse}, use_compress={compress}" in message
    assert "supported: (use_mla=False, use_sparse=False, use_compress=False) -> standard" in (
        message)
    assert "(use_mla=True, use_sparse=False, use_compress=True) -> dsa" in message


@pytest.mark.parametrize("flags", FLAG_ROWS)
def test_310p_always_uses_its_own_backend(flags) -> None:
    assert _select(flags, "310P") == "310p"


def test_unknown_soc_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"SoC 'cpu'; allowed: A2, A3, A5, 310P"):
        _select((False, False, False), "cpu")


@pytest.mark.parametrize("soc", ["A2", "A3", "A5", "310P"])
def test_fa3_takes_precedence_for_plain_attention(soc) -> None:
    assert _select((False, False, False), soc, fa3=True) == "fa3"


@pytest.mark.parametrize("flags", [f for f in FLAG_ROWS if f != (False, False, False)])
def test_fa3_rejects_every_other_combination(flags) -> None:
    mla, sparse, compress = flags
    with pytest.raises(ValueError, match="does not support MLA, SFA or DSA") as err:
        _select(flags, "A3", fa3=True)
    assert f"got use_mla={mla}, use_sparse={sparse}, use_compress={compress}" in str(err.value)
    assert "FA3 supports only (use_mla=False, use_sparse=False, use_compress=False)" in str(
        err.value)


def test_fa3_kernels_must_be_installed_with_their_function() -> None:
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    with pytest.raises(ValueError, match=r"needs the package 'flash_attn_npu_v3'"):
        sel.require_fa3_kernels(missing)
    bare = types.ModuleType("flash_attn_npu_v3")
    with pytest.raises(ValueError, match=r"flash_attn_npu_v3\.flash_attn_with_kvcache"):
        sel.require_fa3_kernels(lambda name: bare)
    bare.flash_attn_with_kvcache = lambda *a: None
    assert sel.require_fa3_kernels(lambda name: bare) is None
    with pytest.raises(ValueError, match="cannot be imported"):
        sel.require_fa3_kernels()  # the real import: not installed here


def test_fa3_request_comes_from_the_resolved_rl_config() -> None:
    import ascend_config

    def requested(rl: dict) -> bool:
        return sel.fa3_requested(ascend_config.resolve({"rl_config": rl}))

    assert requested({"enabled": True, "enable_training_consistency": True}) is True
    assert requested({"enabled": True}) is False
    assert requested({"enable_training_consistency": True}) is False
    assert sel.fa3_requested(ascend_config.resolve({})) is False


def test_selector_flags_read_vllms_selector_config() -> None:
    import torch
    from vllm.v1.attention.selector import AttentionSelectorConfig

    cfg = AttentionSelectorConfig(head_size=64, dtype=torch.bfloat16, kv_cache_dtype=None,
                                  block_size=128, use_mla=True, use_sparse=True)
    assert sel.selector_flags(cfg) == (True, True, False)  # no use_compress field in 0.32
    assert sel.selector_flags(types.SimpleNamespace(use_mla=True, use_compress=True)) == (
        True, False, True)
    assert sel.selector_flags(None) == (False, False, False)


def test_backend_paths_from_a_class_or_a_mapping() -> None:
    assert sel.backend_paths(int, "pkg.Backend", "ep") == {"standard": "pkg.Backend"}
    assert sel.backend_paths({"mla": "pkg.mla:MLA", "standard": "pkg.a.B"}, "pkg.M", "ep") == {
        "mla": "pkg.mla.MLA", "standard": "pkg.a.B"}
    with pytest.raises(ValueError, match=r"ep: unknown attention variant 'gqa'; allowed: "
                                         r"standard, mla, sfa, dsa, fa3, 310p"):
        sel.backend_paths({"gqa": "pkg.G"}, "pkg.M", "ep")
    with pytest.raises(ValueError, match=r"the 'mla' backend must be a class path"):
        sel.backend_paths({"mla": "Backend"}, "pkg.M", "ep")
    with pytest.raises(ValueError, match=r"a backend class or a mapping .* not a str"):
        sel.backend_paths("pkg.Backend", "pkg.M", "ep")
    with pytest.raises(RuntimeError, match=r"'sfa' attention backend is needed but ep provides "
                                           r"only: mla, standard"):
        sel.backend_for("sfa", {"standard": "a.B", "mla": "a.C"}, "ep")


@pytest.fixture
def npu_platform(monkeypatch, fake_torch_npu):
    """The NPU platform on an A2 device (the seam's default SoC id, 223)."""
    from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV
    from vllm_ascend.platform.npu import NPUPlatform

    monkeypatch.delenv(WORKER_INPUTS_ENV, raising=False)
    return NPUPlatform


def _selector(**flags):
    import torch
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(head_size=64, dtype=torch.bfloat16, kv_cache_dtype=None,
                                   block_size=128, **flags)


def test_platform_picks_the_variant_from_the_extension_mapping(npu_platform, fake_torch_npu,
                                                               monkeypatch) -> None:
    # Without another package: vllm-ascend's own backend (its default runtime entry point).
    assert npu_platform.get_attn_backend_cls(None, _selector()) == (
        "vllm_ascend.npu_runtime.attention.backend.AscendAttentionBackend")
    with pytest.raises(RuntimeError, match=r"'mla' attention backend is needed"):
        npu_platform.get_attn_backend_cls(None, _selector(use_mla=True))
    monkeypatch.syspath_prepend(str(EXT_DIR))
    assert npu_platform.get_attn_backend_cls(None, _selector()) == "ascend_test_ext.TestWorker"
    assert npu_platform.get_attn_backend_cls(None, _selector(use_mla=True)) == (
        "ascend_test_ext.TestMLABackend")
    with pytest.raises(RuntimeError, match=r"'sfa' attention backend is needed but entry point "
                                           r"'attention = ascend_test_ext:ATTENTION_BACKENDS' "
                                           r"of ascend-test-ext provides only: mla, standard"):
        npu_platform.get_attn_backend_cls(None, _selector(use_mla=True, use_sparse=True))
    from vllm_ascend.process.process_setup import reset_process_setup

    fake_torch_npu.npu.soc_id = 202  # a 310P device, read by a fresh process
    reset_process_setup()
    with pytest.raises(RuntimeError, match=r"'310p' attention backend is needed"):
        npu_platform.get_attn_backend_cls(None, _selector(use_mla=True))


def test_platform_fa3_path_follows_the_published_config(npu_platform, monkeypatch) -> None:
    import ascend_config
    from vllm_ascend.base.config_channel import WORKER_INPUTS_ENV, publish_worker_inputs

    monkeypatch.syspath_prepend(str(EXT_DIR))
    published: dict[str, str] = {}
    publish_worker_inputs("A2", {"rl_config": {"enabled": True,
                                               "enable_training_consistency": True}},
                          ascend_config.DeploymentFacts(), {}, environ=published)
    monkeypatch.setenv(WORKER_INPUTS_ENV, published[WORKER_INPUTS_ENV])
    with pytest.raises(ValueError, match=r"FA3 attention backend .* does not support MLA"):
        npu_platform.get_attn_backend_cls(None, _selector(use_mla=True))
    with pytest.raises(ValueError, match="needs the package 'flash_attn_npu_v3'"):
        npu_platform.get_attn_backend_cls(None, _selector())
    fake = types.ModuleType("flash_attn_npu_v3")
    fake.flash_attn_with_kvcache = lambda *a: None
    monkeypatch.setitem(sys.modules, "flash_attn_npu_v3", fake)
    # The kernels are there; the test extension maps no 'fa3' backend.
    with pytest.raises(RuntimeError, match=r"'fa3' attention backend is needed"):
        npu_platform.get_attn_backend_cls(None, _selector())


def test_a_single_class_entry_point_serves_standard_only(npu_platform, monkeypatch,
                                                         tmp_path) -> None:
    pkg = tmp_path / "attn_class_only_ext"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("class Backend:\n    pass\n")
    info = tmp_path / "attn_class_only_ext-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: attn-class-only-ext\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[vllm_ascend.runtime]\nattention = attn_class_only_ext:Backend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert npu_platform.get_attn_backend_cls(None, _selector()) == "attn_class_only_ext.Backend"
    with pytest.raises(RuntimeError, match=r"'mla' attention backend is needed but entry point "
                                           r"'attention = attn_class_only_ext:Backend' of "
                                           r"attn-class-only-ext provides only: standard"):
        npu_platform.get_attn_backend_cls(None, _selector(use_mla=True))

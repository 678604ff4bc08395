"""NPU-only helpers, exercised through the schema-bound fake ``torch_npu``
(``torch_npu_double.seam``)."""

from __future__ import annotations

import json

import pytest
from vllm_ascend.base import npu_device as nd


def test_streams_are_created_lazily_and_cached(fake_torch_npu) -> None:
    streams = nd.NpuStreams()
    assert fake_torch_npu.npu.calls == []
    first = streams.get("global")
    assert streams.get("global") is first and fake_torch_npu.npu.called("Stream") == [{}]
    current = streams.current()
    assert current is fake_torch_npu.npu.current_stream() and streams.current() is current
    current.synchronize()  # the real current stream is a Stream, not a marker
    with pytest.raises(ValueError, match="allowed: global"):
        streams.get("nope")


def test_stream_switch(fake_torch_npu) -> None:
    s1, s2 = fake_torch_npu.npu.Stream(), fake_torch_npu.npu.Stream()
    with nd.npu_stream_switch(s1):
        assert fake_torch_npu.npu.current_stream() is s1
    with nd.npu_stream_switch(s2, enabled=False):
        assert fake_torch_npu.npu.current_stream() is not s2
    assert fake_torch_npu.npu.called("stream") == [{"stream": s1}]


@pytest.mark.parametrize("fake_torch_npu", [{"device_properties": {"uuid": "npu-uuid-0"},
                                             "max_memory_allocated": 1234}], indirect=True)
def test_platform_device_calls_go_through_the_seam(fake_torch_npu) -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    NPUPlatform.set_device(3)
    assert NPUPlatform.get_device_name(1) == "Ascend910B3"  # the SocVersion name of id 223
    assert NPUPlatform.get_device_uuid(0) == "npu-uuid-0"
    assert NPUPlatform.get_current_memory_usage(0) == 1234.0
    assert NPUPlatform.num_compute_units(0) == 24  # cube_core_num
    api = fake_torch_npu.npu
    assert api.called("set_device") == [{"device": 3}]
    assert api.called("get_device_name") == [{"device_name": 1}]
    assert api.called("reset_peak_memory_stats") == api.called("max_memory_allocated") == [
        {"device": 0}]


def test_missing_uuid_is_an_error(fake_torch_npu) -> None:
    from vllm_ascend.platform.npu import NPUPlatform

    # torch-npu's device properties are not proven to carry a uuid: the seam has none.
    with pytest.raises(RuntimeError, match="no uuid"):
        NPUPlatform.get_device_uuid(0)


def test_require_npu_runtime(fake_torch_npu, monkeypatch) -> None:
    nd.require_npu_runtime()  # the fake is findable
    monkeypatch.delitem(__import__("sys").modules, "torch_npu")
    with pytest.raises(nd.NpuRuntimeMissingError, match="VLLM_ASCEND_DEVICE=cpu"):
        nd.require_npu_runtime()


def test_hccl_library_and_buffers(monkeypatch) -> None:
    assert nd.find_hccl_library({"HCCL_SO_PATH": "/x/libhccl.so"}) == "/x/libhccl.so"
    with pytest.raises(ValueError, match="HCCL_SO_PATH"):
        nd.find_hccl_library({})
    import torch

    monkeypatch.setattr(torch.version, "cann", "8.0", raising=False)
    assert nd.find_hccl_library({}) == "libhccl.so"
    assert nd.hccl_buffer_size_mb("mc2_group") is None
    assert nd.hccl_buffer_size_mb("dp", 8) == 50


def test_dp_buffer_grows_with_dp_size() -> None:
    assert nd.hccl_buffer_size_mb("dp", 20_000_000) == 77
    assert nd.hccl_buffer_size_mb("dynamic_eplb") == 100
    assert nd.hccl_buffer_size_mb("tp") == 200


def test_custom_op_env_bootstrap(tmp_path) -> None:
    env: dict[str, str] = {"ASCEND_CUSTOM_OPP_PATH": "/other"}
    assert nd.bootstrap_custom_op_env(tmp_path, env) == []  # nothing packaged
    vendor = tmp_path / nd.CUSTOM_OPP_SUBDIR
    vendor.mkdir(parents=True)
    assert nd.bootstrap_custom_op_env(tmp_path, env, include_vendor_lib=True) == [
        "ASCEND_CUSTOM_OPP_PATH", "LD_LIBRARY_PATH"]
    assert env["ASCEND_CUSTOM_OPP_PATH"] == f"{vendor}:/other"
    assert nd.bootstrap_custom_op_env(tmp_path, env, include_vendor_lib=True) == []


def test_compiled_extension_loads_lazily_once(monkeypatch) -> None:
    import importlib

    attempts = []

    def fake_import(name):
        attempts.append(name)
        raise ImportError("libcust_opapi.so: cannot open shared object file")

    monkeypatch.setattr(importlib, "import_module", fake_import)
    ext = nd.CompiledExtension("fake_ext")
    assert ext.loaded is None
    assert ext.load(environ={}) is False and ext.load(environ={}) is False
    assert attempts == ["fake_ext", "fake_ext"]  # one retry with the vendor lib path


def test_local_comm_resources(tmp_path) -> None:
    (tmp_path / "ub_endpoint_npu_5.json").write_text(json.dumps({"a": [1, 2]}, indent=2))
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4, 5"}
    value = nd.setup_local_comm_res(1, {"ascend_local_comm_res_path": str(tmp_path)}, env)
    assert value == '{"a":[1,2]}' and env["ASCEND_LOCAL_COMM_RES"] == value
    assert nd.setup_local_comm_res(0, {}, env) is None

"""Extension-point groups, discovered from a test distribution installed on sys.path."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from vllm_ascend.base import extension_points as ep

EXT_DIR = Path(__file__).resolve().parent / "ext_pkg"


@pytest.fixture
def test_extension(monkeypatch):
    monkeypatch.syspath_prepend(str(EXT_DIR))
    return EXT_DIR


def test_each_group_is_provided_once(test_extension, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.base.extension_points"):
        found = {group: ep.discover(group) for group in ep.GROUPS}
    assert found[ep.CONNECTORS]["AscendTestConnector"].value == "ascend_test_ext:TestConnector"
    assert found[ep.MODELS]["AscendTestForCausalLM"].distribution == "ascend-test-ext"
    assert set(found[ep.RUNTIME]) == set(ep.RUNTIME_KEYS)
    assert list(found[ep.SCHEDULERS]) == ["recompute"]
    assert "not_a_scheduler" in caplog.text and "name must be one of" in caplog.text
    assert ep.runtime_class_paths()["worker"] == "ascend_test_ext.TestWorker"
    assert ep.scheduler_class_paths() == {"recompute": "ascend_test_ext.TestScheduler"}


OWN_RUNTIME = {
    "worker": "vllm_ascend.npu_runtime.worker.NPUWorker",
    "attention": "vllm_ascend.npu_runtime.attention.backend.AscendAttentionBackend",
    "communicator": "vllm_ascend.npu_runtime.communicator.NPUCommunicator",
}


def test_without_another_package_this_package_provides_its_npu_runtime() -> None:
    found = ep.discover(ep.RUNTIME)
    assert {name: ext.class_path for name, ext in found.items()} == OWN_RUNTIME
    assert {ext.distribution for ext in found.values()} == {"vllm-ascend"}
    for ext in found.values():  # each names a class that exists
        assert isinstance(ext.load(), type)


def test_another_package_replaces_each_default_runtime_key(test_extension) -> None:
    found = ep.discover(ep.RUNTIME)
    for name in OWN_RUNTIME:
        assert found[name].distribution == "ascend-test-ext", name


def test_unknown_group_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"allowed: vllm_ascend\.connectors"):
        ep.discover("vllm_ascend.nope")


def test_registration_with_vllm_factories(test_extension) -> None:
    from vllm import ModelRegistry
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.model_executor import model_loader

    def forget() -> None:
        KVConnectorFactory._registry.pop("AscendTestConnector", None)
        ModelRegistry.models.pop("AscendTestForCausalLM", None)
        model_loader._LOAD_FORMAT_TO_MODEL_LOADER.pop("ascend_test_format", None)

    forget()  # vLLM's plugin hooks in an earlier test may have registered the test extension
    try:
        assert ep.register_connectors() == ["AscendTestConnector"]
        assert ep.register_connectors() == []  # idempotent
        import ascend_test_ext

        assert KVConnectorFactory._registry["AscendTestConnector"]() is (
            ascend_test_ext.TestConnector)
        assert ep.register_models() == ["AscendTestForCausalLM"]
        assert "AscendTestForCausalLM" in ModelRegistry.get_supported_archs()
        assert ep.register_model_loaders() == ["ascend_test_format"]
        assert ep.register_model_loaders() == []
        loader = model_loader._LOAD_FORMAT_TO_MODEL_LOADER["ascend_test_format"]
        assert loader.__name__ == "TestLoader"
    finally:
        forget()


def test_npu_all_reduce_is_out_of_place(monkeypatch) -> None:
    """vLLM's `vllm::all_reduce` op may not return its input (torch's aliasing check)."""
    import torch
    import torch.distributed as dist
    from vllm_ascend.npu_runtime.communicator import NPUCommunicator

    group = object()
    seen = []

    def all_reduce(tensor, group=None):  # a group of two ranks holding the same values
        seen.append(group)
        tensor.mul_(2)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    communicator = object.__new__(NPUCommunicator)  # no process group: the method alone
    communicator.device_group = group
    given = torch.tensor([1.0, 2.0, 3.0])
    out = communicator.all_reduce(given)
    assert out.tolist() == [2.0, 4.0, 6.0] and given.tolist() == [1.0, 2.0, 3.0]
    assert out.untyped_storage().data_ptr() != given.untyped_storage().data_ptr()
    assert seen == [group]


def _distribution(root: Path, name: str, groups: dict[str, dict[str, str]]) -> None:
    """An installed distribution (metadata only) declaring ``groups``' entry points."""
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = []
    for group, entries in groups.items():
        lines += [f"[{group}]", *(f"{key} = {value}" for key, value in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def test_the_npu_runtime_group_and_its_earlier_name_are_both_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _distribution(tmp_path, "old-name-ext", {"vllm_ascend.runtime": {"worker": "old_ext:Worker"}})
    _distribution(tmp_path, "both-names-ext", {
        "vllm_ascend.npu_runtime": {"communicator": "new_ext:Communicator"},
        "vllm_ascend.runtime": {"communicator": "new_ext:OldCommunicator"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    found = ep.discover(ep.RUNTIME)
    assert ep.RUNTIME == "vllm_ascend.npu_runtime"
    assert (found["worker"].value, found["worker"].distribution) == ("old_ext:Worker",
                                                                      "old-name-ext")
    assert found["communicator"].value == "new_ext:Communicator"  # the new name wins
    assert found["attention"].distribution == "vllm-ascend"  # nobody replaced it
    assert ep.runtime_class_paths()["worker"] == "old_ext.Worker"

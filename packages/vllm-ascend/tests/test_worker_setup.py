"""The per-rank worker setup: local communication endpoints, then CPU binding."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from vllm_ascend.base import npu_device
from vllm_ascend.process.worker_setup import prepare_worker
from vllm_ascend.runtime import cpu_worker


def _config(extra: dict[str, Any] | None) -> Any:
    kv = None if extra is None else SimpleNamespace(kv_connector_extra_config=extra)
    return SimpleNamespace(kv_transfer_config=kv, parallel_config=SimpleNamespace())


def test_endpoints_of_this_ranks_device_are_loaded_before_binding(tmp_path: Path) -> None:
    for device in (6, 7):
        (tmp_path / f"ub_endpoint_npu_{device}.json").write_text(
            json.dumps({"device": device, "eps": ["a", "b"]}, indent=4))
    env = {"ASCEND_RT_VISIBLE_DEVICES": "6,7"}
    binding = prepare_worker(_config({"ascend_local_comm_res_path": str(tmp_path)}), 1, env)
    assert env["ASCEND_LOCAL_COMM_RES"] == '{"device":7,"eps":["a","b"]}'
    # No Ascend config was published to this (test) process: binding reports and skips.
    assert binding.lines == ["CPU binding skipped: no Ascend config was published to this worker"]


@pytest.mark.parametrize("extra", [None, {}, {"ascend_local_comm_res_path": ""}])
def test_without_an_endpoint_path_nothing_is_set(extra: dict[str, Any] | None) -> None:
    env: dict[str, str] = {}
    prepare_worker(_config(extra), 0, env)
    assert "ASCEND_LOCAL_COMM_RES" not in env


def _bad(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "ub_endpoint_npu_0.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "too large":
        path.write_bytes(b" " * npu_device.LOCAL_COMM_RES_LIMIT + b"{}")
    elif kind == "not json":
        path.write_text("{endpoints")
    elif kind == "not utf-8":
        path.write_bytes(b'{"a": "\xff"}')


@pytest.mark.parametrize(("kind", "message"), [
    ("missing", "cannot be read"), ("directory", "not a regular file"),
    ("fifo", "not a regular file"), ("too large", "larger than 1048576 bytes"),
    ("not json", "not UTF-8 JSON"), ("not utf-8", "not UTF-8 JSON"),
])
def test_a_bad_endpoint_file_is_one_error_naming_it(tmp_path: Path, kind: str,
                                                    message: str) -> None:
    _bad(tmp_path, kind)
    env: dict[str, str] = {}
    with pytest.raises(ValueError, match=message) as err:
        prepare_worker(_config({"ascend_local_comm_res_path": str(tmp_path)}), 0, env)
    assert "ascend_local_comm_res_path" in str(err.value)
    assert str(tmp_path / "ub_endpoint_npu_0.json") in str(err.value)
    assert "ASCEND_LOCAL_COMM_RES" not in env


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    body = b"{}"
    path = tmp_path / "ub_endpoint_npu_0.json"
    path.write_bytes(b" " * (npu_device.LOCAL_COMM_RES_LIMIT - len(body)) + body)
    env: dict[str, str] = {}
    prepare_worker(_config({"ascend_local_comm_res_path": str(tmp_path)}), 0, env)
    assert env["ASCEND_LOCAL_COMM_RES"] == "{}"


def test_the_host_cpu_worker_runs_the_setup_before_its_device(monkeypatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(cpu_worker, "prepare_worker",
                        lambda config, rank: order.append(f"prepare {rank}") or None)
    monkeypatch.setattr(cpu_worker.CPUWorker, "init_device", lambda self: order.append("device"))
    monkeypatch.setattr(cpu_worker.AscendCPUWorker, "_report", lambda self, stage: None)
    worker = object.__new__(cpu_worker.AscendCPUWorker)
    worker.vllm_config, worker.local_rank = _config(None), 3
    worker.init_device()
    assert order == ["prepare 3", "device"]

"""The per-rank duties both workers share: local communication endpoints, then CPU binding with
the engine's config, the late threads, the rank report; the host-CPU worker's order."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from vllm_ascend.base import npu_device
from vllm_ascend.cpu_runtime import worker as cpu_worker
from vllm_ascend.process.process_setup import ProcessSetup
from vllm_ascend.worker_duties import duties
from vllm_ascend.worker_duties.duties import load_comm_endpoints


def _config(extra: dict[str, Any] | None) -> Any:
    kv = None if extra is None else SimpleNamespace(kv_connector_extra_config=extra)
    parallel = SimpleNamespace(local_world_size=1, world_size=1, data_parallel_rank_local=0)
    return SimpleNamespace(kv_transfer_config=kv, parallel_config=parallel)


@pytest.fixture
def engine(make_engine: Any) -> Any:
    return make_engine


def prepare_worker(vllm_config: Any, local_rank: int, env: dict[str, str], cpu: Any) -> Any:
    """The duties' binding call of a host-CPU worker (no plan handed: nothing bound)."""
    return duties.bind_rank(vllm_config, local_rank, cpu, ProcessSetup(), env)


def test_endpoints_of_this_ranks_device_are_loaded_before_binding(tmp_path: Path,
                                                                  engine: Any) -> None:
    for device in (6, 7):
        (tmp_path / f"ub_endpoint_npu_{device}.json").write_text(
            json.dumps({"device": device, "eps": ["a", "b"]}, indent=4))
    env = {"ASCEND_RT_VISIBLE_DEVICES": "6,7"}
    binding = prepare_worker(_config({"ascend_local_comm_res_path": str(tmp_path)}), 1, env,
                             engine("cpu"))
    assert env["ASCEND_LOCAL_COMM_RES"] == '{"device":7,"eps":["a","b"]}'
    assert binding.lines == ["CPU binding left to vLLM: no plan of this plugin was handed to "
                             "the CPU workers"]


@pytest.mark.parametrize("extra", [None, {}, {"ascend_local_comm_res_path": ""}])
def test_without_an_endpoint_path_nothing_is_set(extra: dict[str, Any] | None) -> None:
    env: dict[str, str] = {}
    load_comm_endpoints(_config(extra), 0, env)
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
        load_comm_endpoints(_config({"ascend_local_comm_res_path": str(tmp_path)}), 0, env)
    assert "ascend_local_comm_res_path" in str(err.value)
    assert str(tmp_path / "ub_endpoint_npu_0.json") in str(err.value)
    assert "ASCEND_LOCAL_COMM_RES" not in env


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    body = b"{}"
    path = tmp_path / "ub_endpoint_npu_0.json"
    path.write_bytes(b" " * (npu_device.LOCAL_COMM_RES_LIMIT - len(body)) + body)
    env: dict[str, str] = {}
    load_comm_endpoints(_config({"ascend_local_comm_res_path": str(tmp_path)}), 0, env)
    assert env["ASCEND_LOCAL_COMM_RES"] == "{}"


def test_binding_takes_the_engines_config(engine: Any) -> None:
    process = ProcessSetup()
    off = duties.bind_rank(_config(None), 0, engine("cpu", {"enable_cpu_binding": False}),
                           process, {})
    assert off.lines == ["CPU binding disabled by additional_config.enable_cpu_binding"]
    assert process.cpu_binding == off.lines


def test_an_npu_worker_binds_for_its_devices_soc(monkeypatch: pytest.MonkeyPatch,
                                                  engine: Any) -> None:
    """The engine was resolved for A2; this worker's device reads A3: binding plans for A3."""
    seen: list[tuple[str | None, bool]] = []

    def bind(par: Any, rank: int, soc: str | None, config: Any, check: Any, env: Any,
             npu: int | None = None) -> Any:
        seen.append((soc, config.enable_cpu_binding))
        return duties.WorkerBinding(rank, soc=soc)

    process = ProcessSetup()
    monkeypatch.setattr(process, "device_soc", lambda: "A3")
    monkeypatch.setattr(duties, "bind_this_worker", bind)
    binding = duties.bind_rank(_config(None), 0, engine("A2"), process, {})
    assert seen == [("A3", True)] and binding.soc == "A3"


def test_the_host_cpu_worker_binds_before_its_device_and_reports_after(monkeypatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(cpu_worker.RankDuties, "bind_rank",
                        lambda self: order.append(f"bind {self.local_rank}"))
    monkeypatch.setattr(cpu_worker.CPUWorker, "init_device", lambda self: order.append("device"))
    monkeypatch.setattr(cpu_worker.RankDuties, "report_rank",
                        lambda self, stage: order.append(f"report {stage}"))
    worker = object.__new__(cpu_worker.AscendCPUWorker)
    worker.vllm_config, worker.local_rank = _config(None), 3
    worker.init_device()
    assert order == ["bind 3", "device", "report device"]


def test_a_worker_holds_its_engine_from_init(make_vllm_config: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_ascend.engine import engine_of

    cfg = make_vllm_config(enforce_eager=True)
    monkeypatch.setattr(cpu_worker.CPUWorker, "__init__", lambda self, *a, **k: None)
    worker = cpu_worker.AscendCPUWorker(cfg, 0, 0, "tcp://127.0.0.1:1")
    assert worker.ascend_engine is engine_of(cfg)


@pytest.mark.parametrize(("soc", "applied"), [("cpu", 0), ("A2", 1), ("A5", 1)])
def test_late_threads_are_bound_on_an_npu_only(monkeypatch: pytest.MonkeyPatch, soc: str,
                                               applied: int) -> None:
    """On the host CPU vLLM pinned each OpenMP thread to one CPU of the pool: the late step
    leaves that alone; an NPU worker's late step binds its acl/release (A5: UVB) threads."""
    import ascend_topology as topo

    calls: list[int] = []
    monkeypatch.setattr(topo, "apply", lambda plan, rank: calls.append(rank) or SimpleNamespace(
        done=["acl_thread 7 -> CPU 2"], skipped=[]))
    binding = duties.WorkerBinding(0, plan=SimpleNamespace(), soc=soc, index=1)  # type: ignore[arg-type]
    lines = binding.bind_late_threads()
    assert len(calls) == applied and lines == ["acl_thread 7 -> CPU 2"] * applied

"""Which worker runs the engine (``config_pipeline.workers``): the scheduling policies and
their scheduler, worker selection per SoC (upstream's ``_setup_worker_and_scheduler``: 310P and
Xlite have their own runtime entry points; a missing one is an error naming the extension to
install) and the host-CPU worker class. The NPU runtime's graph-mode choice and V1-runner rule
are tested with the runtime (test_npu_graph_mode.py, test_npu_runtime_parts.py)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.config_pipeline import workers

ALL = {"worker": "rt.NPUWorker", "worker_310p": "rt.NPUWorker310",
       "worker_xlite": "rt.XliteWorker"}
NO_POLICY = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(
    recompute_scheduler_enable=False,
    **{name: types.SimpleNamespace(enabled=False) for name in (
        "dyntra_lb_config", "profiling_chunk_config", "batch_job_sched_config",
        "short_request_first_config")}))


def _decide(soc: str, xlite: bool, runtime: dict[str, str], setting: str = "auto") -> Any:
    return workers.select_worker_and_scheduler(
        worker_setting=setting, soc=soc, xlite=xlite, ascend_config=NO_POLICY, kv_role=None,
        async_scheduling=False, runtime=runtime, schedulers={})


@pytest.mark.parametrize(
    ("soc", "xlite", "worker"),
    [("A2", False, "rt.NPUWorker"), ("A3", False, "rt.NPUWorker"), ("A5", False, "rt.NPUWorker"),
     ("A2", True, "rt.XliteWorker"), ("310P", False, "rt.NPUWorker310"),
     ("310P", True, "rt.NPUWorker310")],  # 310P wins over xlite, as in the reference
)
def test_each_soc_gets_its_worker_entry(soc: str, xlite: bool, worker: str) -> None:
    assert _decide(soc, xlite, ALL).worker_cls == worker
    assert _decide(soc, xlite, {}, setting="my.Worker").worker_cls == "my.Worker"


@pytest.mark.parametrize(
    ("soc", "xlite", "entry", "reference"),
    [("310P", False, "worker_310p", "vllm_ascend._310p.worker_310p.NPUWorker310"),
     ("A3", True, "worker_xlite", "vllm_ascend.xlite.xlite_worker.XliteWorker"),
     ("A2", False, "worker", "vllm_ascend.worker.worker.NPUWorker")],
)
def test_missing_worker_names_the_extension(soc: str, xlite: bool, entry: str,
                                            reference: str) -> None:
    runtime = {k: v for k, v in ALL.items() if k != entry}
    with pytest.raises(RuntimeError) as info:
        _decide(soc, xlite, runtime)
    message = str(info.value)
    assert f"'vllm_ascend.npu_runtime' with name '{entry}'" in message and reference in message


@pytest.fixture
def npu_pipeline(make_vllm_config: Any, fake_torch_npu: Any,
                 monkeypatch: pytest.MonkeyPatch) -> Any:
    from vllm_ascend.config_pipeline.steps import run_npu_pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "ext_pkg"))
    for name in ("PYTORCH_NPU_ALLOC_CONF", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
                 "VLLM_ASCEND_WORKER_CONFIG_INPUTS"):
        monkeypatch.delenv(name, raising=False)

    def run(soc: str, **kwargs: Any) -> Any:
        cfg = make_vllm_config(enforce_eager=True, **kwargs)
        cfg.parallel_config.worker_cls = "auto"  # as on an NPU host
        run_npu_pipeline(cfg, soc)
        return cfg

    return run


def test_pipeline_selects_the_310p_and_xlite_workers(npu_pipeline: Any) -> None:
    assert npu_pipeline("310P").parallel_config.worker_cls == "ascend_test_ext.TestWorker310P"
    xlite = npu_pipeline("A2", additional_config={"xlite_graph_config": {"enabled": True}})
    assert xlite.parallel_config.worker_cls == "ascend_test_ext.TestXliteWorker"
    assert npu_pipeline("A3").parallel_config.worker_cls == "ascend_test_ext.TestWorker"


def test_pipeline_reports_a_missing_310p_extension(npu_pipeline: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_ascend.base import extension_points

    provided = extension_points.runtime_class_paths
    monkeypatch.setattr(extension_points, "runtime_class_paths", lambda: {
        k: v for k, v in provided().items() if k != "worker_310p"})
    with pytest.raises(RuntimeError, match="no installed package provides the 310P worker"):
        npu_pipeline("310P")


def _cfg(**sched):
    base = {"recompute_scheduler_enable": False}
    section = types.SimpleNamespace(enabled=False)
    return types.SimpleNamespace(scheduler_config=types.SimpleNamespace(**{
        **base, "dyntra_lb_config": section, "profiling_chunk_config": section,
        "batch_job_sched_config": section, "short_request_first_config": section, **sched}))


ON = types.SimpleNamespace(enabled=True)


@pytest.mark.parametrize(
    ("sched", "role", "is_async", "key"),
    [({}, None, False, None),
     ({"recompute_scheduler_enable": True}, "kv_consumer", False, "recompute"),
     ({"recompute_scheduler_enable": True}, "kv_consumer", True, "async_recompute"),
     ({"recompute_scheduler_enable": True}, "kv_producer", False, None),
     ({"recompute_scheduler_enable": True, "dyntra_lb_config": ON}, "kv_consumer", True,
      "async_dyntra_lb_recompute"),
     ({"dyntra_lb_config": ON}, "kv_consumer", False, "dyntra_lb"),
     ({"profiling_chunk_config": ON}, None, True, "profiling_chunk"),
     ({"batch_job_sched_config": ON}, None, True, "async_batch_job"),
     ({"short_request_first_config": ON}, None, False, "short_request_first")],
)
def test_scheduler_key(sched, role, is_async, key) -> None:
    policies = workers.scheduler_policy(_cfg(**sched), role)
    assert workers.scheduler_key(policies, is_async) == key


def test_conflicting_policies_are_one_error() -> None:
    policies = workers.scheduler_policy(
        _cfg(profiling_chunk_config=ON, batch_job_sched_config=ON), None)
    with pytest.raises(ValueError, match="cannot be combined"):
        workers.scheduler_key(policies, False)


def test_worker_and_scheduler_decision() -> None:
    decide = workers.select_worker_and_scheduler
    runtime = {"worker": "rt.Worker"}
    kw = {"soc": "A2", "xlite": False, "kv_role": "kv_consumer", "async_scheduling": False}
    cfg = _cfg(recompute_scheduler_enable=True)
    got = decide(worker_setting="auto", ascend_config=cfg, runtime=runtime,
                 schedulers={"recompute": "rt.Recompute"}, **kw)
    assert (got.worker_cls, got.scheduler_cls) == ("rt.Worker", "rt.Recompute")
    mine = decide(worker_setting="my.Worker", ascend_config=_cfg(), runtime={}, schedulers={},
                  **kw)
    assert (mine.worker_cls, mine.scheduler_cls) == ("my.Worker", None)
    with pytest.raises(RuntimeError, match=r"'vllm_ascend\.npu_runtime' with name 'worker'"):
        decide(worker_setting="auto", ascend_config=_cfg(), runtime={}, schedulers={}, **kw)
    with pytest.raises(RuntimeError, match="'recompute' scheduler"):
        decide(worker_setting="auto", ascend_config=cfg, runtime=runtime, schedulers={}, **kw)


def test_ascend_cpu_worker_only_replaces_the_default_worker() -> None:
    cfg = types.SimpleNamespace(parallel_config=types.SimpleNamespace(worker_cls="auto"))
    workers.use_ascend_cpu_worker(cfg)
    assert cfg.parallel_config.worker_cls == "vllm_ascend.cpu_runtime.worker.AscendCPUWorker"
    cfg.parallel_config.worker_cls = "my.Worker"
    workers.use_ascend_cpu_worker(cfg)
    assert cfg.parallel_config.worker_cls == "my.Worker"

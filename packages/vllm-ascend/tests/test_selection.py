"""Worker selection per SoC (upstream's ``_setup_worker_and_scheduler``): 310P and Xlite have
their own runtime entry points; a missing one is an error naming the extension to install."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.config_pipeline import selection

ALL = {"worker": "rt.NPUWorker", "worker_310p": "rt.NPUWorker310",
       "worker_xlite": "rt.XliteWorker"}
NO_POLICY = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(
    recompute_scheduler_enable=False,
    **{name: types.SimpleNamespace(enabled=False) for name in (
        "dyntra_lb_config", "profiling_chunk_config", "batch_job_sched_config",
        "short_request_first_config")}))


def _decide(soc: str, xlite: bool, runtime: dict[str, str], setting: str = "auto") -> Any:
    return selection.select_worker_and_scheduler(
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
    assert f"'vllm_ascend.runtime' with name '{entry}'" in message and reference in message


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

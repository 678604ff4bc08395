"""The two ``check_and_update_config`` pipelines, each a readable list of steps."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_ascend.base import extension_points, npu_device
from vllm_ascend.base.config_channel import ascend_environ
from vllm_ascend.base.trusted_paths import UntrustedPathError, open_trusted_dir
from vllm_ascend.config_pipeline import (
    compile_settings,
    memory,
    parallel_layout,
    vllm_settings,
    workers,
)
from vllm_ascend.engine.registry import build_engine, publish_engine, published_ascend_config
from vllm_ascend.npu_runtime.model_support import RUNTIME_WORKER, refuse_unsupported_model
from vllm_ascend.observability import logging_setup
from vllm_ascend.ops.custom_ops import all_custom_ops
from vllm_ascend.process.process_setup import current_process_setup

if TYPE_CHECKING:
    from ascend_config import AscendConfig
    from vllm.config import VllmConfig

    from vllm_ascend.engine import AscendEngine

logger = logging.getLogger(__name__)


def _build_engine(vllm_config: VllmConfig, soc: str) -> tuple[AscendEngine, dict[str, str]]:
    """The engine of ``vllm_config`` and the Ascend env variables it was resolved with."""
    environ = ascend_environ()
    return build_engine(vllm_config, soc, environ), environ


def write_dump_config(resolved: AscendConfig, cwd: str | None = None) -> Any:
    """Write ``dump_config`` as msprobe's config file under ``cwd``; its path, or None."""
    # <cwd>/.vllm_ascend/msprobe must pass the root rule (another user could swap msprobe's config):
    # if not, one warning and nothing is written.
    import ascend_config

    where = os.getcwd() if cwd is None else cwd
    target = ascend_config.dump_config_file(where)
    try:
        if resolved.dump_config is None:  # a dump_config_path, or nothing: no file written
            path = ascend_config.write_dump_config(resolved, where)
        else:
            # ascend_config.write_dump_config's format (UTF-8, indent 2, non-ASCII kept).
            text = json.dumps(resolved.dump_config, indent=2, ensure_ascii=False)
            with open_trusted_dir(target.parent, create=True) as folder:
                folder.write_atomic(target.name, text.encode("utf-8"))
            path = target
    except UntrustedPathError as exc:
        logger.warning("dump_config: not writing %s: %s; run from a directory only this user "
                       "can write, or pass dump_config_path", target, exc)
        return None
    except OSError as exc:
        raise RuntimeError(
            f"dump_config: cannot write {target} ({exc}); run "
            "from a writable directory or pass an existing file as dump_config_path"
        ) from exc
    if path is not None and resolved.dump_config is not None:
        logger.info("msprobe dump config written to %s", path)
    return path


def run_cpu_pipeline(vllm_config: VllmConfig,
                     cpu_defaults: Callable[[VllmConfig], None]) -> AscendConfig | None:
    """Host-CPU pipeline; the resolved AscendConfig (None without a model config)."""
    logging_setup.configure_console_logging()
    if vllm_config.model_config is None:
        logger.warning("Model config is missing; skipping the Ascend pipeline")
        cpu_defaults(vllm_config)
        compile_settings.disable_vllm_gpu_fusions(vllm_config)
        return None
    engine, environ = _build_engine(vllm_config, "cpu")  # AscendConfigError: all problems
    resolved = engine.config
    write_dump_config(resolved)
    vllm_settings.detect_ascend_quantization(vllm_config)
    vllm_settings.fix_gpu_only_settings(vllm_config)
    workers.use_ascend_cpu_worker(vllm_config)
    # The user's compile request and executor, read before vLLM's CPU defaults change them.
    compile_requested = compile_settings.wants_vllm_compile(vllm_config)
    backend_before = vllm_config.parallel_config.distributed_executor_backend
    cpu_defaults(vllm_config)  # reads VLLM_CPU_KVCACHE_SPACE into kv_cache_memory_bytes
    compile_settings.apply_cpu_compilation(vllm_config, compile_requested)
    memory.default_kv_cache_reservation(vllm_config)
    parallel_layout.keep_one_rank_in_engine_core(vllm_config, backend_before)
    parallel_layout.hand_rank_plan(vllm_config, resolved)
    publish_engine(vllm_config, engine, environ)
    current_process_setup().setup(resolved, "cpu", published_ascend_config)
    return resolved


SPAWN_ENV = "VLLM_WORKER_MULTIPROC_METHOD"


def run_npu_pipeline(vllm_config: VllmConfig,
                     soc: str | Callable[[], str]) -> AscendConfig | None:
    """NPU pipeline (``soc``: given, or detected); the resolved AscendConfig."""
    # Reading the SoC initialises the NPU runtime, which a forked child cannot reuse: workers spawn.
    logging_setup.configure_console_logging()
    if vllm_config.model_config is None:
        logger.warning("Model config is missing; skipping the Ascend pipeline")
        compile_settings.disable_vllm_gpu_fusions(vllm_config)
        return None
    npu_device.require_npu_runtime()
    if callable(soc):
        soc = soc()
        if os.environ.setdefault(SPAWN_ENV, "spawn") == "spawn":
            logger.info("%s=spawn: this process initialised the NPU runtime to read its SoC",
                        SPAWN_ENV)
    engine, environ = _build_engine(vllm_config, soc)  # AscendConfigError: all problems
    facts, resolved = engine.facts, engine.config
    write_dump_config(resolved)
    visible = int(npu_device.torch_npu().npu.device_count())  # the SoC read started the runtime
    parallel_layout.check_parallel_layout(facts, parallel_layout.layout_of(vllm_config, visible))
    vllm_settings.detect_ascend_quantization(vllm_config)
    vllm_settings.fix_gpu_only_settings(vllm_config)
    vllm_settings.use_hccl_eplb_communicator(vllm_config)
    vllm_settings.make_engine_id_unique(vllm_config)
    vllm_settings.fix_execute_model_timeout()
    compile_settings.disable_vllm_gpu_fusions(vllm_config)
    compile_settings.update_compilation_mode(vllm_config, resolved)
    compile_settings.setup_compile_backend(vllm_config, resolved, soc)
    par, sched = vllm_config.parallel_config, vllm_config.scheduler_config
    selection = workers.select_worker_and_scheduler(
        worker_setting=par.worker_cls, soc=soc, xlite=resolved.xlite_graph_config.enabled,
        ascend_config=engine.config, kv_role=facts.kv_role,
        async_scheduling=bool(sched.async_scheduling),
        runtime=extension_points.runtime_class_paths(),
        schedulers=extension_points.scheduler_class_paths(),
    )
    par.worker_cls = selection.worker_cls
    if par.worker_cls == RUNTIME_WORKER:  # this package's runtime: say now what it cannot run
        workers.use_v1_model_runner()
        refuse_unsupported_model(vllm_config.model_config)
        note = workers.choose_graph_mode(vllm_config)
        if note is not None:
            logger.info("%s", note)
    if selection.scheduler_cls is not None:
        sched.scheduler_cls = selection.scheduler_cls
    logger.info("worker/scheduler: %s", selection.reason)
    if soc != "310P":
        cc = vllm_config.compilation_config
        cc.custom_ops = all_custom_ops(cc.custom_ops)
    alloc = memory.npu_alloc_conf(
        os.environ.get("PYTORCH_NPU_ALLOC_CONF"), vllm_config.model_config.enable_sleep_mode
    )
    if alloc is not None:
        os.environ["PYTORCH_NPU_ALLOC_CONF"] = alloc
    memory.apply_derived_edits(vllm_config, resolved, facts)
    publish_engine(vllm_config, engine, environ)
    current_process_setup().setup(resolved, soc, published_ascend_config)
    return resolved

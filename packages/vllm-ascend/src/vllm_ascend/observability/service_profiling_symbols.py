"""The table of vLLM symbols that ms_service_profiler instruments (data only).

Entries are ``module.path:Qualified.name`` (globs allowed) with an optional ``handler``, an
inclusive vLLM version range and ``(name, expr)`` attributes in the profiler's language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

# What each group covers; ``REQUIRED_GROUPS`` must each be represented in a written file.
GROUPS: dict[str, str] = {
    "openai": "OpenAI chat/completion entry",
    "request": "request lifecycle (AsyncLLM, input/output processing)",
    "engine": "engine core steps",
    "scheduler": "schedulers (vLLM's; Ascend ones come from runtime extensions)",
    "kv_cache": "KV cache manager and block pool",
    "execute": "logits processor, sampler, executors, workers",
    "model_runner": "model runner internals",
    "mtp": "MTP and the rejection sampler",
    "dp_meta": "data-parallel meta",
    "spec_decode": "speculative-decoding proposers",
    "kv_transfer_scheduler": "KV-transfer connectors, scheduler side",
    "kv_transfer_worker": "KV-transfer connectors, worker side",
    "kv_output": "KV output aggregation",
    "multimodal": "multimodal encoders and embeddings",
    "ascend": "this package's own functions",
    "extension": "installed runtime extensions",
}
REQUIRED_GROUPS: tuple[str, ...] = (
    "openai", "scheduler", "kv_cache", "execute", "model_runner", "mtp", "request", "dp_meta",
    "spec_decode", "kv_transfer_scheduler", "kv_transfer_worker", "kv_output",
)

# module path, then ':' and a dotted qualified name; '*' / '?' / '[...]' only in the last
# module component and in qualified-name parts.
_SYMBOL = re.compile(r"^(?:[A-Za-z_]\w*\.)*[\w*?\[\]]+:[\w*?\[\]]+(?:\.[\w*?\[\]]+)*$")
_VERSION = re.compile(r"^\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?$")


@dataclass(frozen=True)
class ProfilingSymbol:
    """One entry of the symbol file; ``group`` is for the reader and the tests (not written)."""

    symbol: str
    domain: str
    name: str
    handler: str | None = None
    group: str = field(default="extension", kw_only=True)
    min_version: str | None = field(default=None, kw_only=True)
    max_version: str | None = field(default=None, kw_only=True)
    attributes: tuple[tuple[str, str], ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if not _SYMBOL.match(self.symbol):
            raise ValueError(
                f"profiling symbol {self.symbol!r} must look like 'package.module:Class.method' "
                "(globs allowed in the last module component and the qualified name)"
            )
        if self.group not in GROUPS:
            raise ValueError(f"profiling symbol {self.symbol!r}: unknown group {self.group!r}; "
                             f"allowed: {', '.join(GROUPS)}")
        for label, version in (("min_version", self.min_version),
                               ("max_version", self.max_version)):
            if version is not None and not _VERSION.match(version):
                raise ValueError(f"profiling symbol {self.symbol!r}: {label} {version!r} is not "
                                 "a release like '0.9.1' or '0.15.0rc1'")


_H = "ms_service_profiler.patcher.vllm.handlers.v1."
_CHAT = "vllm.entrypoints.openai.chat_completion.serving:OpenAIServingChat"
_COMPL = "vllm.entrypoints.openai.completion.serving:OpenAIServingCompletion"
_ASYNC_LLM = "vllm.v1.engine.async_llm:AsyncLLM"
_OUT = "vllm.v1.engine.output_processor:OutputProcessor"
_CORE = "vllm.v1.engine.core:EngineCore"
_DP_CORE = "vllm.v1.engine.core:DPEngineCoreProc"
_SCHED = "vllm.v1.core.sched.scheduler:Scheduler"
_KVM = "vllm.v1.core.kv_cache_manager:KVCacheManager"
_POOL = "vllm.v1.core.block_pool:BlockPool"
_EXEC = "vllm.v1.executor"
_RUNNER = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"
_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer"
_KV = "vllm.distributed.kv_transfer.kv_connector"
_MOONCAKE = f"{_KV}.v1.mooncake.mooncake_connector"
_NIXL = f"{_KV}.v1.nixl"

# Attributes of a scheduler's ``schedule`` (its SchedulerOutput).
SCHEDULE_ATTRIBUTES = (
    ("num_scheduled_tokens", "return | attr num_scheduled_tokens | str"),
    ("total_num_scheduled_tokens", "return | attr total_num_scheduled_tokens | str"),
)
_REQ_ARG = (("req_id", "args[1] | attr request_id | str"),)


def _g(group: str, *entries: ProfilingSymbol) -> tuple[ProfilingSymbol, ...]:
    """The entries of one group (keeps the table below readable)."""
    return tuple(replace(e, group=group) for e in entries)


_S = ProfilingSymbol  # short name for the table below

VLLM_SYMBOLS: tuple[ProfilingSymbol, ...] = (
    *_g("openai",
        _S(f"{_CHAT}.create_chat_completion", "OpenAI", "Chat.create_chat_completion"),
        _S(f"{_CHAT}.render_chat_request", "OpenAI", "Chat.render_chat_request"),
        _S(f"{_COMPL}.create_completion", "OpenAI", "Completion.create_completion")),
    *_g("request",
        _S(f"{_ASYNC_LLM}.add_request", "Request", "AsyncLLM.add_request",
          f"{_H}request_handlers:add_request_async"),
        # vLLM up to 0.11 kept a separate engine class; later it is an alias of AsyncLLM.
        _S("vllm.engine.async_llm_engine:AsyncLLMEngine.add_request", "Request",
          "AsyncLLMEngine.add_request", f"{_H}request_handlers:add_request_async",
          max_version="0.11.0"),
        _S(f"{_ASYNC_LLM}.generate", "Request", "AsyncLLM.generate"),
        _S("vllm.v1.engine.input_processor:InputProcessor.process_inputs", "Request",
          "InputProcessor.process_inputs"),
        _S(f"{_OUT}.add_request", "Request", "OutputProcessor.add_request"),
        _S(f"{_OUT}.process_outputs", "Request", "OutputProcessor.process_outputs",
          f"{_H}request_handlers:process_outputs"),
        _S("vllm.v1.engine.llm_engine:LLMEngine.add_request", "Request", "LLMEngine.add_request")),
    *_g("engine",
        _S(f"{_CORE}.add_request", "Engine", "EngineCore.add_request"),
        _S(f"{_CORE}.step", "Engine", "EngineCore.step"),
        _S(f"{_CORE}.step_with_batch_queue", "Engine", "EngineCore.step_with_batch_queue")),
    *_g("scheduler",
        _S(f"{_SCHED}.schedule", "Schedule", "batchFrameworkProcessing",
          f"{_H}batch_handlers:schedule"),
        _S(f"{_SCHED}.add_request", "Scheduler", "Scheduler.add_request",
          f"{_H}batch_handlers:add_request"),
        _S(f"{_SCHED}.update_from_output", "Schedule", "Scheduler.update_from_output",
          attributes=(("total_num_scheduled_tokens",
                       "args[1] | attr total_num_scheduled_tokens | str"),)),
        _S(f"{_SCHED}.finish_requests", "Scheduler", "Scheduler.finish_requests"),
        _S(f"{_SCHED}._preempt_request", "Scheduler", "Scheduler.preempt", attributes=_REQ_ARG),
        _S("vllm.v1.core.sched.async_scheduler:AsyncScheduler._update_after_schedule",
          "Scheduler", "AsyncScheduler.update_after_schedule")),
    *_g("kv_cache",
        _S(f"{_KVM}.get_computed_blocks", "Scheduler", "KVCacheManager.get_computed_blocks",
          f"{_H}kvcache_handlers:get_computed_blocks"),
        _S(f"{_KVM}.allocate_slots", "Scheduler", "KVCacheManager.allocate_slots",
          attributes=(*_REQ_ARG, ("num_new_tokens", "args[2] | str"))),
        _S(f"{_KVM}.free", "Scheduler", "KVCacheManager.free", f"{_H}kvcache_handlers:free"),
        _S(f"{_KVM}.cache_blocks", "Scheduler", "KVCacheManager.cache_blocks"),
        _S(f"{_POOL}.get_new_blocks", "Scheduler", "BlockPool.get_new_blocks")),
    *_g("execute",
        _S("vllm.model_executor.layers.logits_processor:LogitsProcessor.forward", "ModelForward",
          "computing_logits", f"{_H}model_handlers:compute_logits"),
        _S("vllm.v1.sample.sampler:Sampler.forward", "Sample", "sample",
          f"{_H}model_handlers:sampler_forward"),
        _S(f"{_EXEC}.abstract:Executor.execute_model", "Execute", "modelExec",
          f"{_H}model_handlers:execute_model"),
        _S(f"{_EXEC}.multiproc_executor:MultiprocExecutor.execute_model", "Execute", "modelExec",
          f"{_H}model_handlers:execute_model"),
        _S(f"{_EXEC}.uniproc_executor:UniProcExecutor.execute_model", "Execute", "modelExec",
          f"{_H}model_handlers:execute_model"),
        _S("vllm.v1.worker.gpu_worker:Worker.execute_model", "Execute", "Worker.execute_model"),
        _S("vllm.v1.utils:record_function_or_nullcontext", "Execute",
          "record_function_or_nullcontext",
          f"{_H}model_handlers:record_function_or_nullcontext", min_version="0.15.0rc1"),
        _S("vllm.v1.cudagraph_dispatcher:CudagraphDispatcher.dispatch", "Execute",
          "CudagraphDispatcher.dispatch")),
    *_g("model_runner",
        _S(f"{_RUNNER}.execute_model", "Execute", "modelRunnerExec",
          f"{_H}model_handlers:execute_model_runner"),
        _S(f"{_RUNNER}._update_states", "Execute", "GPUModelRunner._update_states"),
        _S(f"{_RUNNER}._prepare_inputs", "Execute", "GPUModelRunner._prepare_inputs"),
        _S(f"{_RUNNER}._preprocess", "Execute", "GPUModelRunner._preprocess"),
        _S(f"{_RUNNER}._build_attention_metadata", "Execute",
          "GPUModelRunner._build_attention_metadata"),
        _S(f"{_RUNNER}._determine_batch_execution_and_padding", "Execute",
          "GPUModelRunner._determine_batch_execution_and_padding"),
        _S(f"{_RUNNER}._model_forward", "ModelForward", "GPUModelRunner._model_forward",
          attributes=(("req_ids", "this | attr input_batch | attr req_ids | str"),)),
        _S(f"{_RUNNER}.sample_tokens", "Sample", "GPUModelRunner.sample_tokens"),
        _S(f"{_RUNNER}._sample", "Sample", "GPUModelRunner._sample"),
        _S(f"{_RUNNER}._bookkeeping_sync", "Execute", "GPUModelRunner._bookkeeping_sync"),
        _S(f"{_RUNNER}._update_states_after_model_execute", "Execute",
          "GPUModelRunner._update_states_after_model_execute")),
    *_g("dp_meta",
        _S(f"{_DP_CORE}.add_request", "Engine", "DPEngineCoreProc.add_request",
          f"{_H}meta_handlers:init_data_parallel"),
        # Listed a second time on purpose: this handler records the worker's DP meta.
        _S(f"{_RUNNER}.execute_model", "Execute", "modelRunnerMeta",
          f"{_H}meta_handlers:init_data_parallel_worker"),
        _S("vllm.v1.worker.dp_utils:coordinate_batch_across_dp", "Execute",
          "coordinate_batch_across_dp"),
        _S(f"{_DP_CORE}._has_global_unfinished_reqs", "Engine",
          "DPEngineCoreProc.has_global_unfinished_reqs")),
    *_g("mtp",
        _S("vllm.v1.sample.rejection_sampler:RejectionSampler.forward", "SpecDecode",
          "RejectionSampler.forward"),
        _S("vllm.v1.sample.rejection_sampler:rejection_sample", "SpecDecode", "rejection_sample"),
        _S(f"{_RUNNER}.propose_draft_token_ids", "SpecDecode",
          "GPUModelRunner.propose_draft_token_ids"),
        _S(f"{_RUNNER}._calc_spec_decode_metadata", "SpecDecode",
          "GPUModelRunner._calc_spec_decode_metadata"),
        _S(f"{_SCHED}.update_draft_token_ids", "SpecDecode", "Scheduler.update_draft_token_ids")),
    *_g("spec_decode",
        # EagleProposer, DraftModelProposer and DFlashProposer inherit these in 0.32; an
        # entry for a subclass is written only where that subclass defines the method.
        _S(f"{_PROPOSER}.propose", "SpecDecode", "draft_propose"),
        _S(f"{_PROPOSER}.prepare_inputs", "SpecDecode", "draft_prepare_inputs"),
        _S("vllm.v1.spec_decode.eagle:EagleProposer.propose", "SpecDecode", "eagle_propose"),
        _S("vllm.v1.spec_decode.ngram_proposer:NgramProposer.propose", "SpecDecode",
          "ngram_propose"),
        _S("vllm.v1.spec_decode.medusa:MedusaProposer.propose", "SpecDecode", "medusa_propose"),
        _S("vllm.v1.spec_decode.suffix_decoding:SuffixDecodingProposer.propose", "SpecDecode",
          "suffix_propose")),
    *_g("kv_transfer_scheduler",
        _S(f"{_MOONCAKE}:MooncakeConnectorScheduler.get_num_new_matched_tokens", "KVTransfer",
          "MooncakeScheduler.matchRemoteKV",
          attributes=(*_REQ_ARG,
                      ("kv_transfer_params", "args[1] | attr kv_transfer_params | str"),
                      ("matched", "return | str"))),
        _S(f"{_MOONCAKE}:MooncakeConnectorScheduler.update_state_after_alloc", "KVTransfer",
          "MooncakeScheduler.updateAfterAlloc",
          attributes=(*_REQ_ARG, ("num_external_tokens", "args[3] | str"))),
        _S(f"{_MOONCAKE}:MooncakeConnectorScheduler.build_connector_meta", "KVTransfer",
          "MooncakeScheduler.buildMeta",
          attributes=(("reqs_to_recv", "return | attr reqs_to_recv | str"),
                      ("reqs_to_send", "return | attr reqs_to_send | str"))),
        _S(f"{_NIXL}.base_scheduler:NixlBaseConnectorScheduler.get_num_new_matched_tokens",
          "KVTransfer", "NixlScheduler.matchRemoteKV", attributes=_REQ_ARG),
        _S(f"{_SCHED}._update_from_kv_xfer_finished", "KVTransfer",
          "Scheduler.updateKVXferFinished",
          attributes=(("finished_recving", "args[1] | attr finished_recving | str"),
                      ("finished_sending", "args[1] | attr finished_sending | str"),
                      ("scheduler_failed_recving",
                       "this | attr failed_recving_kv_req_ids | str"))),
        _S(f"{_SCHED}._handle_blocked_waiting_request", "Schedule",
          "Scheduler.tryPromoteBlockedWaiting",
          attributes=(*_REQ_ARG, ("req_status", "args[1] | attr status | str"),
                      ("promoted", "return | str")))),
    *_g("kv_transfer_worker",
        _S(f"{_MOONCAKE}:MooncakeConnector.start_load_kv", "KVTransfer",
          "MooncakeConnector.startLoadKV",
          attributes=(("reqs_to_recv",
                       "this | attr _connector_metadata | attr reqs_to_recv | str"),)),
        _S(f"{_MOONCAKE}:MooncakeConnectorWorker.start_load_kv", "KVTransfer",
          "MooncakeWorker.startLoadKV",
          attributes=(("tp_rank", "this | attr tp_rank | str"),)),
        _S(f"{_MOONCAKE}:MooncakeConnectorWorker.receive_kv", "KVTransfer",
          "MooncakeWorker.receiveKV"),
        _S(f"{_MOONCAKE}:MooncakeConnectorWorker.get_finished", "KVTransfer",
          "MooncakeWorkerGetFinished",
          attributes=(("finished", "return | str"), ("tp_rank", "this | attr tp_rank | str"))),
        _S(f"{_MOONCAKE}:MooncakeConnector.get_finished", "KVTransfer",
          "MooncakeConnector.get_finished",
          attributes=(("finished", "return | str"),
                      ("scheduler_finished_req_ids", "args[1] | str"))),
        _S(f"{_NIXL}.connector:NixlPullConnector.start_load_kv", "KVTransfer",
          "NixlConnector.startLoadKV"),
        _S(f"{_NIXL}.base_worker:NixlBaseConnectorWorker.get_finished", "KVTransfer",
          "NixlWorkerGetFinished"),
        _S(f"{_KV}.v1.offloading_connector:OffloadingConnector.wait_for_save", "KVTransfer",
          "OffloadingConnector.waitForSave"),
        _S("vllm.v1.worker.kv_connector_model_runner_mixin:KVConnectorModelRunnerMixin."
          "_get_kv_connector_output", "KVTransfer", "ModelRunner.kvConnectorOutput")),
    *_g("kv_output",
        _S(f"{_KV}.utils:KVOutputAggregator.aggregate", "KVTransfer",
          "KVOutputAggregator.aggregate",
          attributes=(
              ("final_finished_sending",
               "return | attr kv_connector_output | attr finished_sending | str"),
              ("final_finished_recving",
               "return | attr kv_connector_output | attr finished_recving | str"),
              ("expected_finished_count", "this | attr _expected_finished_count | str")))),
    *_g("multimodal",
        _S("vllm.model_executor.models.*:*.embed_multimodal", "Multimodal",
          "multimodalEmbedding"),
        _S(f"{_RUNNER}._execute_mm_encoder", "Multimodal", "GPUModelRunner._execute_mm_encoder"),
        _S(f"{_RUNNER}._gather_mm_embeddings", "Multimodal",
          "GPUModelRunner._gather_mm_embeddings")),
)

OWN_SYMBOLS: tuple[ProfilingSymbol, ...] = _g(
    "ascend",
    _S("vllm_ascend.base.forward_context:set_ascend_forward_context", "ModelForward",
      "AscendForwardContext"),
    _S("vllm_ascend.distributed.moe_comm:select_moe_comm_method", "ModelForward", "MoECommSelect"),
    _S("vllm_ascend.compilation.pass_manager:AscendFusionPass.__call__", "Execute",
       "AscendFusionPasses"),
    _S("vllm_ascend.compilation.compiler:AscendCompiler.compile", "Execute", "AscendCompile"),
)

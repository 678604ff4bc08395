"""``check_and_update_config`` in the few modules its flow has, one per phase.

``steps`` runs the two pipelines (``run_npu_pipeline``, ``run_cpu_pipeline``); each hands
``vllm_config`` to the phase modules in one order and never back to one it has left:

- NPU: parallel_layout (the layout check) -> vllm_settings -> compile_settings -> workers
  -> memory;
- host CPU: vllm_settings -> workers -> compile_settings -> memory -> parallel_layout (the
  one-rank executor and the per-rank CPU plan).

``vllm_settings``: the vLLM settings Ascend corrects (quantization auto-detect, GPU-only
settings, EPLB communicator, kv engine id, execute-model timeout); ``compile_settings``: vLLM's
GPU-only fusion flags off, the NPU compilation mode, capture sizes and compile backend, the
host-CPU ``VLLM_COMPILE``; ``workers``: the worker and scheduler classes and what the chosen
worker needs; ``memory``: the NPU allocator options, the edits derived from the deployment and
the host-CPU KV-cache reservation; ``parallel_layout``: the layout rules (draft model
included) and the host-CPU rank placement. The facts and the resolution are the engine's
(``engine.resolution``, reached through ``engine.registry``).
"""

"""The NPU runtime: what vLLM needs to run a dense decoder model on an Ascend NPU.

``worker.NPUWorker`` (vLLM's ``Worker`` on an ``npu`` device), ``model_runner.NPUModelRunner``
(vLLM's V1 ``GPUModelRunner`` with CUDA calls rebound to ``torch.npu``), the attention backend
in ``attention`` (device math through ``torch.ops.ascend.reshape_and_cache`` and
``torch.ops.ascend.paged_attention``) and ``communicator.NPUCommunicator``. vllm-ascend
registers them as its own ``vllm_ascend.npu_runtime`` entry points; another package may replace
any of them. Nothing here is imported until vLLM asks for the class.
"""

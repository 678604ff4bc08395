"""The NPU runtime: vLLM's worker, model runner, attention backend and communicator for an Ascend
NPU, registered as the ``vllm_ascend.npu_runtime`` entry points and imported only on demand.
"""

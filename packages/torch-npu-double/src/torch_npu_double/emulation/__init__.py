"""An emulated Ascend ``npu`` device for tests (never in a published wheel).

``VLLM_ASCEND_EMULATED_NPUS=N`` (with ``VLLM_ASCEND_EMULATED_HBM_GIB``, default 32, and
``VLLM_ASCEND_EMULATED_SOC``, default ``Ascend910B1``) makes torch's ``torch.backends``
autoload (``autoload.autoload``) install it in every process that imports torch:
``torch.device("npu:i")`` tensors in host memory accounted against the emulated HBM,
``torch.npu`` / ``torch_npu.npu`` bound to the real wheel's signatures, ``torch_npu``
kernels checked against the recorded schemas, and an ``hccl`` process-group backend over gloo.
See the package README for what it proves and what it cannot.
"""

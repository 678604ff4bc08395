"""The vllm-ascend test harness (workspace only, never published): engines in worker processes,
`vllm-ascend serve` under load and faults, process forensics, tiny quantized models,
teacher-forced scoring and Inductor graph dumps."""

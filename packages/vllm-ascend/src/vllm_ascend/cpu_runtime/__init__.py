"""The host-CPU platform's worker: vLLM's CPU worker with the Ascend per-rank duties."""

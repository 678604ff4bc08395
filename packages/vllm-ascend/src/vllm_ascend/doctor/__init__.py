"""`vllm-ascend doctor`: can this host serve, and what fixes it when it cannot."""

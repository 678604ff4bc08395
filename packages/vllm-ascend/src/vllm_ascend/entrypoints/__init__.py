"""The `vllm-ascend` command line: `demo`, `serve` and `smollm2` (`entrypoints.cli`)."""

"""vLLM compilation adapters: the Ascend pass manager, compiler, compile cache and graph wrapper."""

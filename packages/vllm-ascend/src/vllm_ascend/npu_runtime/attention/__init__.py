"""The Ascend attention backend of the NPU runtime (vLLM's backend, builder, impl)."""
# Device math: torch.ops.ascend.reshape_and_cache and paged_attention only; per layer the cache is
# (2, num_blocks, block_size, num_kv_heads, head_size), kv[0] keys and kv[1] values.

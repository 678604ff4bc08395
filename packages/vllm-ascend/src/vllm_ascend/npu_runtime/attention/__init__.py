"""The Ascend attention backend of the NPU runtime (vLLM's backend, builder, impl).

Device math goes through two ``torch.ops.ascend`` kernels only: ``reshape_and_cache`` writes the
step's keys and values into the paged cache, ``paged_attention`` attends every query token to
its sequence's cache (prefill without cache, prefix-cache hit, decode and chunked prefill are
one call: causal, bottom-right aligned). Per layer the cache is
``(2, num_blocks, block_size, num_kv_heads, head_size)``, ``kv[0]`` keys and ``kv[1]`` values.
"""

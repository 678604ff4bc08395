"""The per-rank duties both Ascend workers share: CPU binding, late threads, rank report."""

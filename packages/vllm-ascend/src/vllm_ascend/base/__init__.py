"""The lowest layer: per-config stores, trusted paths, the config channel to child processes,
CPU binding, the forward context, the device facts and the entry-point groups."""

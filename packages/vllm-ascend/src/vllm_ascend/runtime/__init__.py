"""The CPU worker and what it reports: the host-CPU runtime above the engine and the compiler."""

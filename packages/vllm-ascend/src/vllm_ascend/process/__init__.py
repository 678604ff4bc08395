"""What a process sets up once: its adjustments to vLLM, file logging, batch invariance, the
device SoC (never a config resolution: that is the engine's)."""

"""What a process sets up once (adjustments to vLLM, logging, batch invariance, the device SoC)."""

"""What a process sets up once: its adjustments to vLLM, file logging, batch invariance, the
config published to it, and a worker's preparation."""

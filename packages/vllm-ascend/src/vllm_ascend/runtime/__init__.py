"""Per-process runtime: process setup, CPU binding, the forward context and batch invariance."""

"""Helpers about particular model architectures (layer names, per-layer settings)."""

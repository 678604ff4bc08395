"""Test support shipped with the plugin: tiny offline models for the demo, tests and benchmarks."""

from vllm_ascend.testing.tiny_models import ARCHES, make_tiny_model

__all__ = ["ARCHES", "make_tiny_model"]

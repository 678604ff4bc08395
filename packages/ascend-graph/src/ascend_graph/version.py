"""The ascend-graph release: the version in its pyproject.toml (fused-graph artifacts record it)."""

__version__ = "0.1.0"

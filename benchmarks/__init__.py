"""Side-by-side benchmarks of the Ascend layer: run with ``uv run python -m benchmarks all``."""

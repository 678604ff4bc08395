"""Stand-in for ``tblib`` when it is not installed (it is not in the workspace lock).

vLLM's ``tests/conftest.py`` only calls ``tblib.pickling_support.install()``, which makes
tracebacks picklable across processes; without it a child's exception arrives without its
traceback. ``tools/vllm_peer_tests.py`` puts this folder on ``PYTHONPATH`` for both sides alike
only when the real ``tblib`` is missing.
"""

"""The model loader class of the test extension (built on vLLM's base class)."""

from ascend_test_ext import make_loader_class

TestLoader = make_loader_class()

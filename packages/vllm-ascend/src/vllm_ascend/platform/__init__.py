"""The Ascend platforms (NPU, host CPU), device probing, version checks, extension points."""

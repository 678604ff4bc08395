"""The workspace's one torch_npu double (never published): ``record`` (the checked-in record of
the real torch-npu wheel), ``seam`` (the schema-bound fake ``torch_npu`` of the unit tests) and
``emulation`` (the emulated Ascend ``npu`` device). See the member's README."""

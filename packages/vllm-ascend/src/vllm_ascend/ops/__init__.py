"""How ``torch.ops.ascend.*`` enters vLLM's models: the IR provider and the CustomOps."""

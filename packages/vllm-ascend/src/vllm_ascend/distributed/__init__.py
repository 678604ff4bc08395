"""Many ranks: MoE communication choice and execution, parallel layout helpers."""

"""What the layers above share and that has no better home."""

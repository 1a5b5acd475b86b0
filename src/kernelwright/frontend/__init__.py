"""The frontend: torch.export capture, decompositions, FX -> IR, the torch.compile backend."""

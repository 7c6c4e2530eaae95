"""The runtime: the owner loop, hand-offs, foreign loops, workers, the process slot, group commit."""

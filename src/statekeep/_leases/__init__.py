"""Fenced leases as the stores serve them, and the keep-alive of an Agent's lease."""

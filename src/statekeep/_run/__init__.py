"""The run model: a State's history, the State, resume and its repair, lineage (pure, no I/O)."""

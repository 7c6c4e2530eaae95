"""Protection of what a store keeps: redaction, encryption at rest, rekey."""

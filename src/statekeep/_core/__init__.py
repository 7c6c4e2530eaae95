"""The pure core: errors, ids, the codec, records, labels and times, queries, ranges, write rules, scrubbing (no I/O)."""

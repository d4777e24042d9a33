"""What every part shares, at the bottom of the layers: errors, the data types (documents, chunks, answers), the
registries parts register in, checked option values, provenance, token counting, and the small utilities (bounded
LRUs, safe file writes, an SQLite key-value store, redaction, an HTTP client)."""

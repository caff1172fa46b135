"""Canonical JSON, the hashes bound into every record, and their verification."""

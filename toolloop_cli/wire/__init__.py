"""Bytes on the wire that more than one layer reads: bodies a server sent compressed."""

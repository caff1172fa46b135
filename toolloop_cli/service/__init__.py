"""The library API behind the commands: one module per command family, no Typer, no Rich.

``operations`` starts, steps and resumes; ``approvals`` records decisions; ``views`` builds
the read models ``show``/``runs`` print; ``verify`` reads a store for ``audit.verify``;
``diff`` compares runs. Everything here is handed a store and returns records, so programs
can drive toolloop without the CLI (``toolloop_cli.__all__`` re-exports the main names).
"""

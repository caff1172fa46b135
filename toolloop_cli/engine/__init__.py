"""The loop as a finite state machine: neutral types, states, transitions, guards.

Nothing here knows a provider's message shapes, a terminal, SQLite or HTTP.
"""

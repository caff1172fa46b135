"""toolloop: run LLM tool-calling loops as a persisted finite state machine."""

__version__ = "0.1.0"

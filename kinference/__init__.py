"""kinference: the picker that routes every LLM inference request in a cluster."""

__version__ = "0.1.0"

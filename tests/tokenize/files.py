"""The tests' tokenizer files: the benchmark's tiny model (`loadtest.tiny_model`)."""

from loadtest.tiny_model import TEMPLATE, WORDS, write_model

__all__ = ["TEMPLATE", "WORDS", "write_model"]

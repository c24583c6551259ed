"""Scorers, one module each; `registry.build_scorers` makes them from the `routing:` config."""

"""Hostile input and security: fuzzing of every parser and surface, TLS, ACLs, ids."""

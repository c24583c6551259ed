"""Operator-facing observability: structured logs, per-request metrics and log lines, and
`kinference state`, the cluster view read from Redis."""

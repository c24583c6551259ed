"""Cluster-wide state through Redis: every replica scores with the whole cluster's state.

Picks never wait on Redis: they read this instance's local view, which background tasks
keep in step with the other replicas (see docs/redis.md).
"""

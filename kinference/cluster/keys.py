"""Every Redis key kinference uses, built in one place: the schema is an operator interface.

All keys share one hash tag (`{kinference}` for the default prefix `kinference:`), so the
whole schema lives in one Redis Cluster slot: pipelines and scripts may touch several keys,
and the traffic (a few commands per flush, not per request) is small for one node.
See docs/redis.md for what each key holds and the redis-cli recipes.
"""

from __future__ import annotations

from dataclasses import dataclass

# Time-to-live of each kind of key, with its unit. Instance-owned keys are refreshed by the
# owner's heartbeat; the rest expire by themselves.
HEARTBEAT_TTL_MS = 3_000  # milliseconds: an instance silent this long is dead, its load gone
LEADER_TTL_MS = 3_000  # milliseconds: a pool's scrape leader renews its lease each second
ENGINES_TTL_S = 60  # seconds: the shared engine readings hash outlives a silent leader a bit
STATS_TTL_S = 3_600  # seconds: per-minute statistics hashes kept one hour for dashboards
USAGE_TTL_S = 3_600  # seconds: per-minute tenant usage hashes kept one hour
LEASES_TTL_S = 120  # seconds: a tenant's budget leases (60 s window) plus slack
# Blacklist keys carry the cool-down itself as their TTL (milliseconds, set by the writer).


def hash_tag(prefix: str) -> str:
    """`kinference:` -> `{kinference}:`; a prefix that already has a tag is kept as it is."""
    if "{" in prefix and "}" in prefix.split("{", 1)[1]:
        return prefix
    name = prefix.rstrip(":") or "kinference"
    return "{" + name + "}:"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names under one prefix."""

    prefix: str = "kinference:"

    @property
    def root(self) -> str:
        return hash_tag(self.prefix)

    def events(self) -> str:
        """Stream: every instance's batched events (XADD MAXLEN ~ REDIS_STREAM_MAXLEN)."""
        return f"{self.root}events"

    def instances(self) -> str:
        """Set: ids of instances that have announced themselves (pruned when their
        heartbeat key is gone)."""
        return f"{self.root}instances"

    def heartbeat(self, instance: str) -> str:
        """String: the instance is alive while it exists (PX HEARTBEAT_TTL_MS)."""
        return f"{self.root}instance:{instance}"

    def load(self, instance: str) -> str:
        """Hash: endpoint -> requests in flight picked by this instance, plus `~seq`, the
        sequence number of its last flush (PEXPIRE HEARTBEAT_TTL_MS)."""
        return f"{self.root}load:{instance}"

    def blacklist(self, provider: str) -> str:
        """Hash: one cooled provider (`namespace/name`): reason, detail, count, first_seen,
        last_seen, instance; its TTL is the cool-down left."""
        return f"{self.root}blacklist:{provider}"

    def blacklist_pattern(self) -> str:
        return f"{self.root}blacklist:*"

    def provider_of(self, key: str) -> str:
        """The provider a blacklist key names."""
        return key.removeprefix(f"{self.root}blacklist:")

    def leases(self, tenant: str) -> str:
        """Hash: epoch second -> budget tokens leased to replicas in that second
        (EXPIRE LEASES_TTL_S)."""
        return f"{self.root}tenant:{tenant}:leases"

    def usage(self, tenant: str) -> str:
        """Hash: epoch minute -> tokens the tenant used that minute (EXPIRE USAGE_TTL_S)."""
        return f"{self.root}tenant:{tenant}:usage"

    def tenants(self) -> str:
        """Set: tenants with recorded usage, for `kinference state` (EXPIRE USAGE_TTL_S;
        trimmed back to MAX_TRACKED_TENANTS members by SPOP when it grows past them)."""
        return f"{self.root}tenants"

    def stats(self, minute: int) -> str:
        """Hash: `instance|endpoint|model|field` -> that instance's count for one epoch
        minute (EXPIRE STATS_TTL_S); fields ttft_ms_sum, ttft_count, itl_b0..itl_b14
        (layout-1 bucket counts, which add up across instances)."""
        return f"{self.root}stats:{minute}"

    def leader(self, pool: str) -> str:
        """String: the instance scraping this pool's engines (PX LEADER_TTL_MS)."""
        return f"{self.root}leader:{pool}"

    def engines(self) -> str:
        """Hash: endpoint -> latest engine reading as JSON, written by scrape leaders
        (EXPIRE ENGINES_TTL_S)."""
        return f"{self.root}engines"

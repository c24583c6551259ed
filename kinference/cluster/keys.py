"""Every Redis key kinference uses, built in one place: the schema is an operator interface.

Global keys (membership, provider blacklist, tenants, statistics) share one hash tag
(`{kinference}` for the default prefix `kinference:`). With the `pools` layout (the default)
each pool's events stream, load hashes, engine readings and scrape lease live under that
pool's own tag (`{kinference:default/chat}`), so Redis Cluster spreads pools over its
masters while a flush's pipeline (load hash before stream entry, a script on a snapshot) still
touches one slot. `Keys.for_pool` gives a pool's keys; the `single` layout is the schema
before pools had tags (every key under `{kinference}`), for a rolling upgrade.
See docs/redis.md for what each key holds and the redis-cli recipes, docs/scaling.md why.
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


POOLS_LAYOUT = "pools"  # per-pool hash tags (the default)
SINGLE_LAYOUT = "single"  # every key under the one global tag (the schema before pools)
_POOL_REF_MAX = 200  # characters of a pool ref kept in its tag (refs are Kubernetes names)


def pool_tag(prefix: str, pool: str) -> str:
    """`kinference:` + `default/chat` -> `{kinference:default/chat}:`: the global tag with
    the pool inside its braces (braces in a ref would end the tag early: replaced)."""
    tag = hash_tag(prefix)
    ref = pool[:_POOL_REF_MAX].replace("{", "(").replace("}", ")")
    close = tag.index("}", tag.index("{"))
    return f"{tag[:close]}:{ref}{tag[close:]}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names under one prefix; with `pool`, the keys of that pool's shard."""

    prefix: str = "kinference:"
    layout: str = POOLS_LAYOUT
    pool: str = ""  # "" = the global keys

    @property
    def root(self) -> str:
        if self.pool and self.layout == POOLS_LAYOUT:
            return pool_tag(self.prefix, self.pool)
        return hash_tag(self.prefix)

    @property
    def top(self) -> str:
        """The global tag: membership, blacklist, tenants and statistics live under it."""
        return hash_tag(self.prefix)

    def for_pool(self, pool: str) -> Keys:
        """The keys of one pool's shard (the global keys for "" or the single layout)."""
        return Keys(self.prefix, self.layout, pool)

    def global_keys(self) -> Keys:
        return Keys(self.prefix, self.layout)

    def pool_pattern(self) -> str:
        """SCAN pattern of every pool's events stream (the pools that have a shard)."""
        tag = hash_tag(self.prefix)
        close = tag.index("}", tag.index("{"))
        return f"{tag[:close]}:*{tag[close:]}events"

    def pool_of_stream(self, key: str) -> str:
        """The pool ref inside a pool stream key found by `pool_pattern`."""
        tag = hash_tag(self.prefix)
        close = tag.index("}", tag.index("{"))
        return key.removeprefix(tag[:close] + ":").rsplit("}", 1)[0]

    def events(self) -> str:
        """Stream: every instance's batched events for this shard (XADD MAXLEN ~
        REDIS_STREAM_MAXLEN); the global one carries provider cool-downs (and, in the single
        layout or from a replica of the old schema, everything)."""
        return f"{self.root}events"

    def instances(self) -> str:
        """Set: ids of instances that have announced themselves (pruned when their
        heartbeat key is gone)."""
        return f"{self.top}instances"

    def alive(self) -> str:
        """Sorted set: instance -> Redis server time (ms) of its last heartbeat; one read
        tells every replica's liveness (members older than HEARTBEAT_TTL_MS are dead;
        pruned after ten of them)."""
        return f"{self.top}alive"

    def heartbeat(self, instance: str) -> str:
        """String: the instance is alive while it exists (PX HEARTBEAT_TTL_MS)."""
        return f"{self.top}instance:{instance}"

    def load(self, instance: str) -> str:
        """Hash: endpoint -> requests in flight picked by this instance, plus `~seq`, the
        sequence number of its last flush (PEXPIRE HEARTBEAT_TTL_MS)."""
        return f"{self.root}load:{instance}"

    def blacklist(self, provider: str) -> str:
        """Hash: one cooled provider (`namespace/name`): reason, detail, count, first_seen,
        last_seen, instance; its TTL is the cool-down left."""
        return f"{self.top}blacklist:{provider}"

    def blacklist_pattern(self) -> str:
        return f"{self.top}blacklist:*"

    def provider_of(self, key: str) -> str:
        """The provider a blacklist key names."""
        return key.removeprefix(f"{self.top}blacklist:")

    def leases(self, tenant: str) -> str:
        """Hash: epoch second -> budget tokens leased to replicas in that second
        (EXPIRE LEASES_TTL_S)."""
        return f"{self.top}tenant:{tenant}:leases"

    def usage(self, tenant: str) -> str:
        """Hash: epoch minute -> tokens the tenant used that minute (EXPIRE USAGE_TTL_S)."""
        return f"{self.top}tenant:{tenant}:usage"

    def usage_batch(self, instance: str) -> str:
        """String: the id of the instance's last usage batch applied (EXPIRE USAGE_TTL_S):
        a batch sent again after a reply was lost is not added twice."""
        return f"{self.top}usage-batch:{instance}"

    def tenants(self) -> str:
        """Set: tenants with recorded usage, for `kinference state` (EXPIRE USAGE_TTL_S;
        trimmed back to MAX_TRACKED_TENANTS members by SPOP when it grows past them)."""
        return f"{self.top}tenants"

    def stats(self, minute: int) -> str:
        """Hash: `instance|endpoint|model|field` -> that instance's count for one epoch
        minute (EXPIRE STATS_TTL_S); fields ttft_ms_sum, ttft_count, itl_b0..itl_b14
        (layout-1 bucket counts, which add up across instances) and the TTFT model's sample
        sums: prefill_*, service_*, text_* and busy_* (`cluster.stats`)."""
        return f"{self.top}stats:{minute}"

    def leader(self, pool: str) -> str:
        """String: the instance scraping this pool's engines (PX LEADER_TTL_MS); in the
        pool's shard."""
        return f"{self.for_pool(pool).root}leader:{pool}"

    def engines(self) -> str:
        """Hash: endpoint -> latest engine reading as JSON, written by scrape leaders
        (EXPIRE ENGINES_TTL_S); one per pool shard."""
        return f"{self.root}engines"

"""Building blocks shared by every section of the policy file.

Field types (`DnsLabel`, `Ref`, `ApiPath`, ...) validate one value and quote it back in
their error; `PolicyModel` is the base of every section (frozen, unknown keys are errors).

Validation problems are raised as `ValueError`. `ItemError` additionally says where below
the failing model the problem is (a list index, a key), so the loader can point at that
line rather than at the model's first line; `ItemErrors` carries several of them, for the
cross-reference checks that look at the whole file at once.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from kinference.hostport import split_host_port

# Kubernetes object names: a namespace is an RFC 1123 label, other names an RFC 1123
# subdomain (labels joined by dots), both lower case.
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_MAX_SUBDOMAIN = 253
# The longest model name or alias a policy may hold. The gateway shares it: a served model
# name longer than any the picker routes is not taken from a response, nor made a label.
MAX_MODEL_CHARS = 256
# An HTTP path (and optional query) as sent on the wire: printable ASCII, no space, no
# fragment. A leading '//' would read as a host to some URL joiners.
_API_PATH = re.compile(r"/(?!/)[!-~]*")
# A word such as a hint or an Azure api-version: safe unescaped in a query string.
_WORD = re.compile(r"[A-Za-z0-9._-]+")

Loc = tuple[int | str, ...]


class ItemError(ValueError):
    """A validation problem at `path` below the model that raised it.

    `path` is appended to pydantic's error location, so the message points at the item
    (`pools[2].name`) rather than at the whole list (`pools`).
    """

    def __init__(self, message: str, *path: int | str) -> None:
        super().__init__(message)
        self.path: Loc = path


class ItemErrors(ValueError):
    """Several `ItemError`s found in one pass; the loader reports them in line order."""

    def __init__(self, errors: Iterable[ItemError]) -> None:
        self.errors = tuple(errors)
        super().__init__(str(self.errors[0]) if self.errors else "invalid policy")


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"expected a DNS label (lower-case letters, digits and '-', at most 63), got {value!r}"
        )
    return value


def _dns_subdomain(value: str) -> str:
    labels = value.split(".")
    if len(value) > _MAX_SUBDOMAIN or not all(_DNS_LABEL.fullmatch(part) for part in labels):
        raise ValueError(
            f"expected a DNS name (lower-case letters, digits, '-' and '.'), got {value!r}"
        )
    return value


def check_ref(value: str) -> str:
    """`value` if it is a pool's or provider's `NAMESPACE/NAME` (a DNS label, then a DNS
    name), else ValueError; also the gateway's check of the pool it names."""
    namespace, slash, name = value.partition("/")
    if not slash or not _DNS_LABEL.fullmatch(namespace):
        raise ValueError(f"expected NAMESPACE/NAME (e.g. 'default/chat'), got {value!r}")
    _dns_subdomain(name)
    return value


def _endpoint(value: str) -> str:
    _host, port = split_host_port(value)
    if port == 0:  # fine for a listen address, but nothing can be reached on port 0
        raise ValueError(f"endpoint port must be 1..65535, got {value!r}")
    return value


def _model_name(value: str) -> str:
    if not value or value != value.strip():
        raise ValueError(f"expected a model name without surrounding spaces, got {value!r}")
    if len(value) > MAX_MODEL_CHARS:
        raise ValueError(
            f"a model name is at most {MAX_MODEL_CHARS} characters, got {len(value)}: "
            f"{value[:40]!r}..."
        )
    return value


def _api_path(value: str) -> str:
    if not _API_PATH.fullmatch(value) or "#" in value:
        raise ValueError(
            f"expected a path starting with '/' (printable ASCII, no spaces or '#'), got {value!r}"
        )
    return value


def _word(value: str) -> str:
    if not _WORD.fullmatch(value):
        raise ValueError(f"expected letters, digits, '.', '_' or '-', got {value!r}")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]
# A pool or provider named from elsewhere in the file: `namespace/name`.
Ref = Annotated[str, AfterValidator(check_ref)]
Endpoint = Annotated[str, AfterValidator(_endpoint)]
ModelName = Annotated[str, AfterValidator(_model_name)]
ApiPath = Annotated[str, AfterValidator(_api_path)]
Word = Annotated[str, AfterValidator(_word)]


def reject_duplicates(items: Iterable[Hashable], what: str, key: str | None = None) -> None:
    """Raise `ItemError` at the second occurrence of any item, naming the first.

    `key` names the field of each item that holds the duplicate, if the items are models.
    """
    first_seen: dict[Hashable, int] = {}
    for index, item in enumerate(items):
        if item in first_seen:
            path: Loc = (index,) if key is None else (index, key)
            raise ItemError(f"duplicate {what} {item!r} (first at index {first_seen[item]})", *path)
        first_seen[item] = index


class PolicyModel(BaseModel):
    """Base of every policy model: frozen, unknown keys are errors, no NaN or infinity."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

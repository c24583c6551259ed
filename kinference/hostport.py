"""`HOST:PORT` strings: parsed and formatted in one place, importable by every layer (the
policy file's endpoints and the process settings both use them; this module imports
nothing of kinference)."""

from __future__ import annotations

import ipaddress
import re

# One RFC 1123 label; a hostname is one or more of these joined by dots.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
_MAX_PORT = 65535
_MAX_HOSTNAME = 253


def split_host_port(value: str) -> tuple[str, int]:
    """Split `HOST:PORT` into `(host, port)`.

    HOST is a hostname, an IPv4 address or a bracketed IPv6 address (`[::1]:9002`); the
    brackets are removed from the returned host (use `format_host_port` to add them back).
    PORT is decimal, 0..65535 (0 asks the OS for an ephemeral port when binding).
    Raises `ValueError` with a message quoting `value`.
    """
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        _check_ipv6(host, value)
    elif ":" in host:
        raise ValueError(f"expected HOST:PORT with the IPv6 host in brackets, got {value!r}")
    else:
        _check_hostname(host, value)
    return host, _parse_port(port_text, value)


def format_host_port(host: str, port: int) -> str:
    """Join a host and port into `HOST:PORT`, bracketing IPv6 hosts (inverse of split)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_ipv6(host: str, value: str) -> None:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise ValueError(f"expected an IPv6 address in brackets, got {value!r}") from None


def _check_hostname(host: str, value: str) -> None:
    labels = host.split(".")
    if len(host) > _MAX_HOSTNAME or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    # All-numeric dotted names are meant as IPv4 addresses: '10.0.0.500' is a typo, not a host.
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"invalid IPv4 address in {value!r}") from None


def _parse_port(port_text: str, value: str) -> int:
    if not _PORT.fullmatch(port_text) or int(port_text) > _MAX_PORT:
        raise ValueError(f"port must be 0..65535, got {value!r}")
    return int(port_text)

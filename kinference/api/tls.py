"""TLS and mutual TLS for the gRPC listener, with certificates re-read when they rotate.

The certificate files are those of a Kubernetes Secret mounted as a volume (cert-manager
renews them in place). gRPC asks `CertificateFiles.fetch` for a configuration at every new
TLS handshake; it answers with a fresh one only when a file's modification time or size has
changed since the last read, so a rotated certificate is served to the next connection
without a restart, and connections already open keep theirs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from kinference.settings import Settings

log = logging.getLogger(__name__)

# (mtime in nanoseconds, size in bytes) per file: a change in either means a rotation.
_Stamp = tuple[tuple[int, int], ...]


class TlsFileError(ValueError):
    """A certificate, key or CA file cannot be read."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files: the server's chain and key, and the CA that signs client certificates
    (when set, every client must present a certificate it signed)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    @property
    def paths(self) -> tuple[Path, ...]:
        extra = (self.client_ca_file,) if self.client_ca_file is not None else ()
        return (self.cert_file, self.key_file, *extra)


class CertificateFiles:
    """Reads the PEM files, and again after they change on disk."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.reloads = 0  # rotations picked up since the start
        self._stamp = self._current_stamp()
        self.initial = self._configuration()

    def _current_stamp(self) -> _Stamp:
        try:
            stats = [path.stat() for path in self.files.paths]
        except OSError as exc:
            raise TlsFileError(f"cannot read {exc.filename}: {exc.strerror}") from exc
        return tuple((stat.st_mtime_ns, stat.st_size) for stat in stats)

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        files = self.files
        try:
            chain = files.cert_file.read_bytes()
            key = files.key_file.read_bytes()
            roots = files.client_ca_file.read_bytes() if files.client_ca_file else None
        except OSError as exc:
            raise TlsFileError(f"cannot read {exc.filename}: {exc.strerror}") from exc
        return grpc.ssl_server_certificate_configuration([(key, chain)], roots)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration after a rotation, else None (keep the
        current one). A half-written rotation keeps the current one too; gRPC asks again
        at the next handshake."""
        try:
            stamp = self._current_stamp()
            if stamp == self._stamp:
                return None
            configuration = self._configuration()
        except TlsFileError as exc:
            log.warning("TLS files unreadable, keeping the current certificate: %s", exc)
            return None
        self._stamp = stamp
        self.reloads += 1
        log.info("TLS certificate files changed: serving the new certificate")
        return configuration


def server_credentials(certificates: CertificateFiles) -> grpc.ServerCredentials:
    """Credentials for `add_secure_port`: TLS, and mTLS when a client CA is set."""
    return grpc.dynamic_ssl_server_credentials(
        certificates.initial,
        # grpc-stubs omits the None a fetcher returns to keep the current configuration.
        certificates.fetch,  # type: ignore[arg-type]
        require_client_authentication=certificates.files.client_ca_file is not None,
    )


def listener_files(settings: Settings) -> TlsFiles | None:
    """The listener's TLS files from the settings; None serves plaintext."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    return TlsFiles(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)


def bind(server: grpc.aio.Server, address: str, files: TlsFiles | None) -> int:
    """Add the listening port, with TLS when `files` are given; returns the bound port
    (0 when binding failed)."""
    if files is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, server_credentials(CertificateFiles(files)))

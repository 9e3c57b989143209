"""How the gRPC server listens: its credentials (PEM files, TensorFlow Serving's SSLConfig file, or
Google's ALTS) and the server arguments a deployment passes (`--grpc_channel_arguments`).

Both are read when the server is built, so that a bad file or argument stops the start with a message
naming it (ConfigError) rather than failing the first call.

    >>> credentials(settings)                  # None: insecure
    >>> channel_arguments("grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb")
    [('grpc.max_connection_age_ms', 2000), ('grpc.lb_policy_name', 'grpclb')]
"""

from __future__ import annotations

from pathlib import Path

import grpc

from service.protocols.proto.ssl_config_pb2 import SSLConfig
from service.repository.config import ConfigError, parse_text_proto
from service.settings import Settings

__all__ = ["channel_arguments", "credentials", "read_ssl_config"]


def channel_arguments(text: str) -> list[tuple[str, int | str]]:
    """`key=value` pairs separated by commas; a value that is a 32-bit integer is passed as one, as
    TensorFlow Serving does (gRPC tells integer arguments from string ones). ConfigError for a pair
    without `=` or without a key."""
    pairs: list[tuple[str, int | str]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--grpc_channel_arguments: '{item}' is not key=value (e.g. grpc.max_connection_age_ms=2000)")
        value = value.strip()
        try:
            number = int(value)
            pairs.append((key, number) if -(2**31) <= number < 2**31 else (key, value))
        except ValueError:
            pairs.append((key, value))
    return pairs


def read_ssl_config(path: Path) -> SSLConfig:
    """TensorFlow Serving's SSLConfig text proto; ConfigError naming the file when it cannot be read, is
    not an SSLConfig, or lacks the key or certificate."""
    source = f"SSL config file {path}"
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{source}: cannot read it: {e.strerror or e}") from None
    config = parse_text_proto(text, SSLConfig(), source)
    missing = [name for name in ("server_key", "server_cert") if not getattr(config, name).strip()]
    if missing:
        raise ConfigError(f"{source}: {' and '.join(missing)} must hold the PEM text")
    if config.client_verify and not config.custom_ca.strip():
        raise ConfigError(f"{source}: client_verify needs custom_ca, the CA that signs client certificates")
    return config


def credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """The credentials every gRPC listener uses (None: insecure); ConfigError for a bad SSL config file."""
    if settings.grpc_alts:
        return grpc.alts_server_credentials()
    if settings.grpc_ssl_config_file is not None:
        ssl = read_ssl_config(settings.grpc_ssl_config_file)
        # As TensorFlow Serving: without client_verify, no client certificate is asked for (custom_ca unused).
        return grpc.ssl_server_credentials([(ssl.server_key.encode(), ssl.server_cert.encode())],
                                           root_certificates=ssl.custom_ca.encode() if ssl.client_verify else None,
                                           require_client_auth=ssl.client_verify)
    if settings.grpc_tls_cert is None:
        return None
    ca = settings.grpc_tls_ca.read_bytes() if settings.grpc_tls_ca is not None else None
    return grpc.ssl_server_credentials([(settings.grpc_tls_key.read_bytes(), settings.grpc_tls_cert.read_bytes())],
                                       root_certificates=ca, require_client_auth=ca is not None)

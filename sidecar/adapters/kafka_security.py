"""How every Kafka client connects: TLS context and SASL options from :class:`KafkaSettings`.

:func:`security_options` gives the keyword arguments that every aiokafka client
(consumer, producer, admin) takes, so all of them connect alike. Secrets held
in files (``kafka.sasl_password_file``, ``kafka.ssl.key_password_file``) are
read each time options are built, so a rotated Kubernetes secret is used by
the next client made. Problems are :class:`~sidecar.errors.ConfigError` naming
the field, never a secret's value.

OAUTHBEARER (Amazon MSK IAM, Confluent Cloud OAuth, any OIDC provider): the
setting ``kafka.sasl_oauth_token_provider`` is ``"module:attr"``; ``attr`` is
imported from ``module`` (which must be importable, e.g. installed beside
sidecar or on ``PYTHONPATH``) and is either an
:class:`aiokafka.abc.AbstractTokenProvider` instance, or a callable taking no
argument (a class or a factory) that returns one. aiokafka awaits its
``token()`` for each authentication.
"""

from __future__ import annotations

import importlib
import ssl
from pathlib import Path

from aiokafka.abc import AbstractTokenProvider
from pydantic import SecretStr

from sidecar.errors import ConfigError
from sidecar.settings import KafkaSettings, KafkaSslSettings, security_problems

__all__ = ["read_secret", "security_options", "ssl_context", "token_provider"]


def read_secret(value: SecretStr | None, path: Path | None, field: str) -> str | None:
    """The secret given inline or in the file ``path`` (trailing newlines stripped)."""
    if value is not None:
        return value.get_secret_value()
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ConfigError(f"{field}: cannot read {str(path)!r} ({reason})") from None


def ssl_context(settings: KafkaSslSettings) -> ssl.SSLContext:
    """A client TLS context: the CA file or the system store, hostname checked by default."""
    try:
        if settings.ca_file is not None:
            context = ssl.create_default_context(
                ssl.Purpose.SERVER_AUTH, cafile=str(settings.ca_file)
            )
            if settings.use_system_ca:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"kafka.ssl.ca_file: {str(settings.ca_file)!r} is not a readable PEM CA bundle "
            f"({_reason(exc)})"
        ) from None
    context.check_hostname = settings.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if settings.cert_file is not None:
        password = read_secret(
            settings.key_password, settings.key_password_file, "kafka.ssl.key_password_file"
        )
        try:
            context.load_cert_chain(
                str(settings.cert_file),
                keyfile=str(settings.key_file) if settings.key_file is not None else None,
                password=password,
            )
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                "kafka.ssl.cert_file/kafka.ssl.key_file: cannot load the client certificate "
                f"and key ({_reason(exc)}; check kafka.ssl.key_password if the key is encrypted)"
            ) from None
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return getattr(exc, "strerror", None) or type(exc).__name__


def token_provider(spec: str) -> AbstractTokenProvider:
    """The token provider that ``"module:attr"`` names (see the module docstring)."""
    module_name, _, attr = spec.partition(":")
    field = "kafka.sasl_oauth_token_provider"
    try:
        module = importlib.import_module(module_name.strip())
    except Exception as exc:  # noqa: BLE001 (an import runs user code; its error is shown)
        raise ConfigError(
            f"{field}: cannot import module {module_name.strip()!r} ({type(exc).__name__}: {exc})"
        ) from None
    try:
        found = getattr(module, attr.strip())
    except AttributeError:
        raise ConfigError(
            f"{field}: module {module_name.strip()!r} has no {attr.strip()!r}"
        ) from None
    if isinstance(found, AbstractTokenProvider):
        return found
    if callable(found):
        try:
            made = found()
        except Exception as exc:  # noqa: BLE001 (user code; its error is shown)
            raise ConfigError(f"{field}: {spec} failed: {type(exc).__name__}: {exc}") from None
        if isinstance(made, AbstractTokenProvider):
            return made
        raise ConfigError(
            f"{field}: {spec}() returned a {type(made).__name__}, "
            "not an aiokafka.abc.AbstractTokenProvider"
        )
    raise ConfigError(
        f"{field}: {spec} is a {type(found).__name__}, not an aiokafka.abc.AbstractTokenProvider "
        "or a callable returning one"
    )


def security_options(settings: KafkaSettings) -> dict[str, object]:
    """The security keyword arguments of every aiokafka client (ConfigError when unusable)."""
    problems = security_problems(settings)  # also for settings built without validation
    if problems:
        raise ConfigError("; ".join(problems))
    protocol = settings.security_protocol
    options: dict[str, object] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl_context(settings.ssl)
    if protocol.startswith("SASL_") and settings.sasl_mechanism is not None:
        options["sasl_mechanism"] = settings.sasl_mechanism
        if settings.sasl_mechanism == "OAUTHBEARER":
            assert settings.sasl_oauth_token_provider is not None  # security_problems
            options["sasl_oauth_token_provider"] = token_provider(
                settings.sasl_oauth_token_provider
            )
        else:
            options["sasl_plain_username"] = settings.sasl_username
            options["sasl_plain_password"] = read_secret(
                settings.sasl_password, settings.sasl_password_file, "kafka.sasl_password_file"
            )
    return options

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

import contextlib
import importlib
import logging
import ssl
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    UnsupportedSaslMechanismError,
)
from pydantic import SecretStr

from sidecar.errors import ConfigError, SourceError
from sidecar.settings import KafkaSettings, KafkaSslSettings, security_problems

__all__ = [
    "bootstrap_errors",
    "connect_error",
    "not_authorized",
    "read_secret",
    "security_options",
    "ssl_context",
    "start_client",
    "token_provider",
]


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


# -- errors that name their cause ------------------------------------------------------------

_AUTH_FAILED = (SaslAuthenticationFailed, AuthenticationFailedError)
_MECHANISM_REFUSED = (UnsupportedSaslMechanismError, AuthenticationMethodNotSupported)


def principal(settings: KafkaSettings) -> str:
    """Who the brokers see, as ACLs spell it (``User:NAME``), or a description."""
    if settings.security_protocol.startswith("SASL_") and settings.sasl_username:
        return f"User:{settings.sasl_username}"
    if settings.security_protocol.startswith("SASL_"):
        return "the OAUTHBEARER principal"
    if settings.ssl.cert_file is not None:
        return "the client certificate's principal"
    return "User:ANONYMOUS"


def not_authorized(
    settings: KafkaSettings, operation: str, kind: str, name: str, field: str
) -> str:
    """The words for an ACL refusal: what was refused, to whom, and what to grant."""
    return (
        f"not authorised to {operation} {kind} {name!r} ({field}) as {principal(settings)}; "
        f"grant that principal {operation} on the {kind} (an ACL), or change {field}"
    )


def connect_error(
    settings: KafkaSettings,
    exc: BaseException,
    seen: Sequence[BaseException] = (),
    fields: Mapping[str, str] | None = None,
) -> SourceError:
    """A client could not start: say why in the settings' terms (auth, TLS, ACL, network).

    ``seen`` holds the errors aiokafka logged while bootstrapping (it wraps them all in
    one ``KafkaConnectionError``); the most telling one decides the message. ``fields``
    maps the client's topics to the settings that name them.
    """
    causes = [*seen, exc]
    where = f"Kafka at {settings.bootstrap_servers}"
    protocol = settings.security_protocol
    for cause in causes:
        if isinstance(cause, _AUTH_FAILED):
            return SourceError(
                f"authentication failed at {where} as {settings.sasl_username or '(no user)'!r} "
                f"with SASL {settings.sasl_mechanism} ({_said(cause)}); check "
                "kafka.sasl_mechanism, kafka.sasl_username and kafka.sasl_password "
                "(SIDECAR_KAFKA__SASL_PASSWORD) or kafka.sasl_password_file"
            )
    for cause in causes:
        if isinstance(cause, _MECHANISM_REFUSED):
            return SourceError(
                f"the brokers at {where.removeprefix('Kafka at ')} refused SASL mechanism "
                f"{settings.sasl_mechanism} ({_said(cause)}); check kafka.sasl_mechanism"
            )
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return SourceError(
                f"TLS failed with {where}: the broker's certificate was not accepted "
                f"({getattr(cause, 'verify_message', None) or cause}); check kafka.ssl.ca_file (the CA "
                "that signed it), kafka.ssl.use_system_ca and kafka.ssl.check_hostname"
            )
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            return SourceError(
                f"TLS handshake with {where} failed ({getattr(cause, 'reason', None) or cause}); check that the "
                f"listener speaks TLS (kafka.security_protocol {protocol}) and the client "
                "certificate settings kafka.ssl.cert_file and kafka.ssl.key_file"
            )
    for cause in causes:
        if isinstance(cause, TopicAuthorizationFailedError):
            topic = str(cause.args[0]) if cause.args else "?"
            field = (fields or {}).get(topic, "the setting naming it")
            return SourceError(not_authorized(settings, "DESCRIBE", "topic", topic, field))
        if isinstance(cause, GroupAuthorizationFailedError):
            group = str(cause.args[0]) if cause.args else settings.group_id
            return SourceError(not_authorized(settings, "READ", "group", group, "kafka.group_id"))
        if isinstance(cause, ClusterAuthorizationFailedError):
            return SourceError(
                not_authorized(
                    settings,
                    "the needed operation on",
                    "cluster",
                    "kafka-cluster",
                    "the principal's ACLs",
                )
            )
    hint = (
        " (a TLS listener drops plaintext clients: is kafka.security_protocol right?)"
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
        else ""
    )
    return SourceError(
        f"cannot reach {where}: {exc}; check kafka.bootstrap_servers "
        f"(SIDECAR_KAFKA__BOOTSTRAP_SERVERS) and the network{hint}"
    )


def _said(exc: BaseException) -> str:
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith("[Error") and ": " in text else text


class _Seen(logging.Handler):
    """Keeps the exceptions that aiokafka logs (as arguments) while a client starts."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.errors.extend(a for a in args if isinstance(a, BaseException))
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])


@contextlib.contextmanager
def bootstrap_errors() -> Iterator[list[BaseException]]:
    """The errors aiokafka logs inside the block (for :func:`connect_error`)."""
    handler = _Seen()
    logger = logging.getLogger("aiokafka")
    logger.addHandler(handler)
    try:
        yield handler.errors
    finally:
        logger.removeHandler(handler)


async def start_client(
    client: Any, settings: KafkaSettings, fields: Mapping[str, str] | None = None
) -> None:
    """``await client.start()``, a failure raised as a :class:`SourceError` naming its cause
    (``fields``: as for :func:`connect_error`)."""
    with bootstrap_errors() as seen:
        try:
            await client.start()
        except (KafkaError, OSError) as exc:
            raise connect_error(settings, exc, seen, fields) from exc

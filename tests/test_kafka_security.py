"""Kafka security settings: validation naming the fields, TLS contexts, secrets never shown."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from sidecar.adapters.kafka_security import (
    connect_error,
    security_options,
    ssl_context,
    token_provider,
)
from sidecar.errors import ConfigError
from sidecar.settings import KafkaSettings, Settings, load_settings

SECRET = "s3cr3t-Value-42"


pytestmark = pytest.mark.usefixtures("no_sidecar_variables")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, and a client certificate with a key encrypted under SECRET (openssl)."""
    root = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=root, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-passout", f"pass:{SECRET}", "-keyout", "client.key",
            "-out", "client.csr", "-subj", "/CN=client")  # fmt: skip
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "client.pem", "-days", "2")  # fmt: skip
    (root / "key.pass").write_text(SECRET + "\n")
    (root / "sasl.pass").write_text(SECRET + "\n")
    return {
        "ca": root / "ca.pem",
        "cert": root / "client.pem",
        "key": root / "client.key",
        "key_pass": root / "key.pass",
        "sasl_pass": root / "sasl.pass",
    }


def problems_of(kafka: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        load_from(kafka)
    return str(caught.value)


def load_from(kafka: dict[str, Any]) -> Settings:
    """Settings read from a YAML file holding ``kafka``, as ``sidecar run --config`` reads them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sidecar.yaml"
        path.write_text(yaml.safe_dump({"kafka": kafka}), encoding="utf-8")
        return load_settings(path)


def test_plaintext_default_gives_only_the_protocol() -> None:
    assert security_options(KafkaSettings()) == {"security_protocol": "PLAINTEXT"}


def test_tls_without_a_ca_names_both_ways_to_give_one() -> None:
    message = problems_of({"security_protocol": "SSL"})
    assert "kafka.ssl.ca_file" in message
    assert "kafka.ssl.use_system_ca" in message
    assert "\n" not in message


def test_sasl_without_a_mechanism_names_the_field(pki: dict[str, Path]) -> None:
    message = problems_of({"security_protocol": "SASL_SSL", "ssl": {"ca_file": str(pki["ca"])}})
    assert "kafka.sasl_mechanism" in message


def test_password_and_password_file_together_refused(pki: dict[str, Path]) -> None:
    message = problems_of(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "u",
            "sasl_password": SECRET,
            "sasl_password_file": str(pki["sasl_pass"]),
        }
    )
    assert "kafka.sasl_password and kafka.sasl_password_file" in message
    assert SECRET not in message


def test_key_password_and_its_file_together_refused(pki: dict[str, Path]) -> None:
    message = problems_of(
        {
            "security_protocol": "SSL",
            "ssl": {
                "ca_file": str(pki["ca"]),
                "cert_file": str(pki["cert"]),
                "key_file": str(pki["key"]),
                "key_password": SECRET,
                "key_password_file": str(pki["key_pass"]),
            },
        }
    )
    assert "kafka.ssl.key_password and kafka.ssl.key_password_file" in message
    assert SECRET not in message


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    message = problems_of(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "sasl_password_file": str(tmp_path / "missing.pass"),
            "ssl": {"ca_file": str(tmp_path / "missing.pem")},
        }
    )
    assert "kafka.sasl_password_file: cannot read" in message
    assert "kafka.ssl.ca_file: cannot read" in message


def test_sasl_fields_without_a_sasl_protocol_refused() -> None:
    message = problems_of({"sasl_mechanism": "PLAIN", "sasl_username": "u"})
    assert "kafka.sasl_mechanism, kafka.sasl_username set" in message
    assert "PLAINTEXT" in message


def test_tls_fields_without_tls_refused(pki: dict[str, Path]) -> None:
    message = problems_of({"ssl": {"ca_file": str(pki["ca"])}})
    assert "kafka.ssl.ca_file set but kafka.security_protocol is PLAINTEXT" in message


def test_unknown_mechanism_refused() -> None:
    message = problems_of({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"})
    assert "kafka.sasl_mechanism" in message


def test_scram_needs_user_and_password() -> None:
    message = problems_of({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"})
    assert "needs kafka.sasl_username" in message
    assert "needs kafka.sasl_password" in message


def test_oauthbearer_needs_a_provider_spelled_module_attr() -> None:
    base = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"}
    assert "needs kafka.sasl_oauth_token_provider" in problems_of(base)
    assert "expected 'module:attr'" in problems_of(base | {"sasl_oauth_token_provider": "x.y"})


def test_the_cli_says_one_line_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            kafka:
              security_protocol: SASL_SSL
              sasl_username: u
              sasl_password: {SECRET}
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "kafka.sasl_mechanism" in lines[0]
    assert "kafka.ssl.ca_file" in lines[0]
    assert SECRET not in done.stderr + done.stdout


def test_secrets_never_in_str_or_repr(pki: dict[str, Path]) -> None:
    settings = load_from(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "u",
            "sasl_password": SECRET,
            "ssl": {
                "ca_file": str(pki["ca"]),
                "cert_file": str(pki["cert"]),
                "key_file": str(pki["key"]),
                "key_password": SECRET,
            },
        }
    )
    for shown in (str(settings), repr(settings), repr(settings.kafka), str(settings.kafka.ssl)):
        assert SECRET not in shown
    assert SECRET not in settings.model_dump_json()
    options = security_options(settings.kafka)
    assert options["sasl_plain_password"] == SECRET  # given to the client, and only there
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert isinstance(options["ssl_context"], ssl.SSLContext)


def test_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch, pki: dict[str, Path]) -> None:
    monkeypatch.setenv("SIDECAR_KAFKA__SASL_PASSWORD", SECRET)
    settings = load_from(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "ssl": {"ca_file": str(pki["ca"])},
        }
    )
    assert security_options(settings.kafka)["sasl_plain_password"] == SECRET


def test_password_file_read_without_its_newline(pki: dict[str, Path]) -> None:
    settings = load_from(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "u",
            "sasl_password_file": str(pki["sasl_pass"]),
        }
    )
    assert security_options(settings.kafka)["sasl_plain_password"] == SECRET


def test_tls_context_checks_certificates_and_hostnames(pki: dict[str, Path]) -> None:
    settings = load_from({"security_protocol": "SSL", "ssl": {"ca_file": str(pki["ca"])}})
    context = ssl_context(settings.kafka.ssl)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "test-ca"),),)]
    relaxed = load_from(
        {"security_protocol": "SSL", "ssl": {"ca_file": str(pki["ca"]), "check_hostname": False}}
    )
    assert not ssl_context(relaxed.kafka.ssl).check_hostname


def test_system_store_without_a_ca_file() -> None:
    settings = load_from({"security_protocol": "SSL", "ssl": {"use_system_ca": True}})
    assert ssl_context(settings.kafka.ssl).verify_mode == ssl.CERT_REQUIRED


def test_encrypted_client_key_loads_with_its_password_file(pki: dict[str, Path]) -> None:
    tls = {"ca_file": str(pki["ca"]), "cert_file": str(pki["cert"]), "key_file": str(pki["key"])}
    good = load_from(
        {"security_protocol": "SSL", "ssl": tls | {"key_password_file": str(pki["key_pass"])}}
    )
    ssl_context(good.kafka.ssl)  # loads, or raises
    wrong = load_from({"security_protocol": "SSL", "ssl": tls | {"key_password": "nope"}})
    with pytest.raises(ConfigError) as caught:
        ssl_context(wrong.kafka.ssl)
    assert "kafka.ssl.cert_file/kafka.ssl.key_file" in str(caught.value)
    assert "nope" not in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_ca_file_that_is_not_pem_is_named(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    settings = load_from({"security_protocol": "SSL", "ssl": {"ca_file": str(bogus)}})
    with pytest.raises(ConfigError, match=r"kafka\.ssl\.ca_file"):
        ssl_context(settings.kafka.ssl)


class _Provider(AbstractTokenProvider):  # type: ignore[misc]
    async def token(self) -> str:
        return "a-token"


PROVIDER = _Provider()


def make_provider() -> AbstractTokenProvider:
    return _Provider()


def test_token_provider_hook_takes_an_instance_or_a_factory() -> None:
    assert token_provider(f"{__name__}:PROVIDER") is PROVIDER
    assert isinstance(token_provider(f"{__name__}:make_provider"), _Provider)
    settings = load_from(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": f"{__name__}:make_provider",
        }
    )
    options = security_options(settings.kafka)
    assert isinstance(options["sasl_oauth_token_provider"], _Provider)
    assert "sasl_plain_password" not in options


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_such_module_xyz:p", "cannot import module 'no_such_module_xyz'"),
        (f"{__name__}:missing", "has no 'missing'"),
        (f"{__name__}:SECRET", "not an aiokafka.abc.AbstractTokenProvider"),
        ("os:getcwd", "returned a str"),
    ],
)
def test_token_provider_problems_named(spec: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        token_provider(spec)
    assert "kafka.sasl_oauth_token_provider" in str(caught.value)
    assert says in str(caught.value)


def _sasl(**extra: Any) -> KafkaSettings:
    return KafkaSettings.model_validate(
        {
            "bootstrap_servers": "b1:9093",
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "svc",
            "sasl_password": SECRET,
            **extra,
        }
    )


def test_only_a_connection_failure_blames_the_network() -> None:
    bootstrap = KafkaConnectionError("Unable to bootstrap from [('b1', 9093)]")
    refused = ConnectionRefusedError(111, "Connect call failed")
    message = str(connect_error(_sasl(), bootstrap, [refused]))
    assert message.startswith("cannot reach Kafka at b1:9093")
    assert "kafka.bootstrap_servers" in message
    assert "kafka.security_protocol" in message  # a plaintext client on a TLS port is dropped


def test_authentication_failure_named_over_the_connection_error() -> None:
    bootstrap = KafkaConnectionError("Unable to bootstrap")
    failed = SaslAuthenticationFailed("Authentication failed due to invalid credentials")
    message = str(connect_error(_sasl(), bootstrap, [OSError("reset"), failed]))
    assert message.startswith("authentication failed at Kafka at b1:9093 as 'svc' with SASL")
    assert "invalid credentials" in message
    assert "kafka.sasl_password" in message
    assert "bootstrap_servers" not in message
    assert SECRET not in message


def test_tls_failures_name_the_tls_settings() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "unable to get local issuer certificate"
    message = str(connect_error(_sasl(), KafkaConnectionError("x"), [verify]))
    assert message.startswith("TLS failed with Kafka at b1:9093")
    assert "unable to get local issuer certificate" in message
    assert "kafka.ssl.ca_file" in message
    other = str(connect_error(_sasl(), KafkaConnectionError("x"), [ssl.SSLError(1, "bad")]))
    assert "kafka.ssl.cert_file" in other


def test_acl_refusals_name_what_and_who() -> None:
    topic = str(
        connect_error(_sasl(), TopicAuthorizationFailedError("t1"), [], {"t1": "kafka.topic"})
    )
    assert topic.startswith("not authorised to DESCRIBE topic 't1' (kafka.topic) as User:svc")
    group = str(connect_error(_sasl(group_id="g"), GroupAuthorizationFailedError("g")))
    assert group.startswith("not authorised to READ group 'g' (kafka.group_id) as User:svc")

"""The own socket's login, as far as TLS goes without a broker (SASL is proved against the real
broker in integration/test_secured_listeners.py and test_secrets_in_errors.py): a server the
client does not trust, and a server that refuses the client's (missing) certificate, are
refused logins naming the protocol and what to check; nothing listening is a retriable
connection error. What a login summary says."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import kafka.errors as kafka_errors
import pytest

from unaligned.errors import KafkaAuthenticationError
from unaligned.kafka.clients.client_options import client_config_from_options
from unaligned.kafka.clients.socket_login import login_summary, open_logged_in
from unaligned.testing.tls_material import TlsMaterial, make_tls_material


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def mtls_server(tls: TlsMaterial) -> Iterator[int]:
    """A loopback TLS server with the broker's certificate that requires a client's."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls.ca_pem)
    context.load_cert_chain(tls.server_pem)
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            tls_conn = context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            try:
                tls_conn.do_handshake()
            except (OSError, ssl.SSLError):
                # the alert is sent; read what the client sent before closing, so that the
                # close is no reset that could overtake the alert
                raw = socket.socket(fileno=tls_conn.detach())
                raw.settimeout(2)
                try:
                    while raw.recv(65536):
                        pass
                except OSError:
                    pass
                raw.close()
            else:
                tls_conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield int(listener.getsockname()[1])
    listener.close()


def _kwargs(port: int, **options: str) -> dict[str, object]:
    params = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL", **options}
    return dict(client_config_from_options(params).client_kwargs)


def test_a_server_the_client_does_not_trust(tmp_path: Path, mtls_server: int) -> None:
    other = make_tls_material(tmp_path)
    kwargs = _kwargs(mtls_server, **{"ssl.truststore.location": str(other.ca_pem)})
    with pytest.raises(KafkaAuthenticationError, match="not trusted.*kafka.ssl.truststore"):
        open_logged_in("127.0.0.1", mtls_server, kwargs, 5)


def test_a_server_that_refuses_the_client(tls: TlsMaterial, mtls_server: int) -> None:
    kwargs = _kwargs(mtls_server, **{"ssl.truststore.location": str(tls.ca_pem)})
    with pytest.raises(KafkaAuthenticationError, match=r"\(SSL\): the broker refused the client"):
        open_logged_in("127.0.0.1", mtls_server, kwargs, 5)


def test_nothing_listening_is_retriable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(kafka_errors.KafkaConnectionError) as failed:
        open_logged_in("127.0.0.1", port, _kwargs(port), 2)
    assert failed.value.retriable


def test_login_summary() -> None:
    assert login_summary({}) == "PLAINTEXT"
    assert login_summary({"security_protocol": "SSL"}) == "SSL"
    assert (
        login_summary({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"})
        == "SASL_SSL PLAIN"
    )


def test_an_expired_oauth_token_is_called_expired_and_a_valid_one_is_not() -> None:
    import time as clock

    from unaligned.kafka.clients.socket_login import _expired
    from unaligned.testing.oidc_issuer import OidcIssuer

    with OidcIssuer({}) as issuer:
        expired = issuer.mint("app", lifetime_s=60, now=clock.time() - 600)
        valid = issuer.mint("app")
    said = _expired("OAUTHBEARER", f"n,,\x01auth=Bearer {expired}\x01\x01".encode())
    assert said is not None and said.startswith("the token expired at ")
    assert "540 s before this login" in said or "541 s before this login" in said
    assert "eyJ" not in said
    assert _expired("OAUTHBEARER", f"n,,\x01auth=Bearer {valid}\x01\x01".encode()) is None
    assert _expired("PLAIN", b"\x00alice\x00pw") is None

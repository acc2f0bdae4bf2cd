"""TlsSettings -> an SSLContext, checked by a real TLS handshake with a loopback server that
shows the broker's certificate and requires the client's: PEM files, PKCS12 trust and key
stores, inline PEM (an encrypted key), kafka-python's file names; stores that cannot be read
are refused naming the option, never a password."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from unaligned.errors import OptionError
from unaligned.kafka.login.tls_stores import (
    JKS_MAGIC,
    ClientIdentity,
    InlinePem,
    StoreFile,
    TlsSettings,
    tls_context,
)
from unaligned.testing.tls_material import TlsMaterial, make_tls_material


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"), "sp", "kp")


@pytest.fixture(scope="module")
def server(tls: TlsMaterial) -> Iterator[int]:
    """A loopback TLS server with the broker's certificate, client certificates required: it
    answers each connection with the client's common name."""
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
            try:
                with context.wrap_socket(conn, server_side=True) as tls_conn:
                    subject = dict(item[0] for item in tls_conn.getpeercert()["subject"])
                    tls_conn.sendall(subject["commonName"].encode())
            except (OSError, ssl.SSLError):
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield int(listener.getsockname()[1])
    listener.close()


def _client_name(settings: TlsSettings, port: int) -> str:
    context = tls_context(settings)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            return conn.recv(64).decode()


def _file(
    option: str, path: Path, store_type: str | None, password: str | None = None
) -> StoreFile:
    return StoreFile(option, str(path), store_type, password)


@pytest.mark.parametrize(
    "way",
    ["pem-files", "pkcs12-stores", "inline-pem", "kafka-python-files", "untyped-stores"],
)
def test_every_way_of_giving_the_stores_makes_a_handshake(
    tls: TlsMaterial, server: int, way: str
) -> None:
    settings = {
        "pem-files": TlsSettings(
            _file("t", tls.ca_pem, "PEM"), ClientIdentity(_file("k", tls.client_pem, "PEM"))
        ),
        "pkcs12-stores": TlsSettings(
            _file("t", tls.truststore_p12, "PKCS12", "sp"),
            ClientIdentity(_file("k", tls.client_p12, "PKCS12", "sp")),
        ),
        "inline-pem": TlsSettings(
            InlinePem("t", tls.ca_pem.read_text()),
            ClientIdentity(
                InlinePem("c", tls.client_chain_pem.read_text()),
                InlinePem("k", tls.client_key_encrypted_pem.read_text()),
                "kp",
            ),
        ),
        "kafka-python-files": TlsSettings(
            _file("t", tls.ca_pem, "PEM"),
            ClientIdentity(
                _file("c", tls.client_chain_pem, "PEM"),
                _file("k", tls.client_key_encrypted_pem, "PEM"),
                "kp",
            ),
        ),
        "untyped-stores": TlsSettings(
            _file("t", tls.truststore_p12, None, "sp"),
            ClientIdentity(_file("k", tls.client_p12, None, "sp")),
        ),
    }[way]
    assert _client_name(settings, server) == "unaligned-client"


def test_the_servers_certificate_is_checked(tmp_path: Path, server: int) -> None:
    other = make_tls_material(tmp_path)  # another authority
    settings = TlsSettings(_file("t", other.ca_pem, "PEM"))
    with pytest.raises(ssl.SSLCertVerificationError):
        _client_name(settings, server)


def test_no_key_reaches_a_file_unencrypted(
    tls: TlsMaterial, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[bytes] = []
    real_fdopen = os.fdopen

    def spy(fd: int, mode: str = "r", *args: object) -> object:
        handle = real_fdopen(fd, mode, *args)  # type: ignore[call-overload]
        write = handle.write

        def keep(data: bytes) -> int:
            written.append(data)
            return write(data)

        handle.write = keep
        return handle

    monkeypatch.setattr(os, "fdopen", spy)
    tls_context(TlsSettings(identity=ClientIdentity(_file("k", tls.client_p12, "PKCS12", "sp"))))
    assert written and b"ENCRYPTED PRIVATE KEY" in written[0]
    assert b"BEGIN PRIVATE KEY" not in b"".join(written)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            TlsSettings(StoreFile("kafka.ssl.truststore.location", "/no/such.p12", "PKCS12")),
            "kafka.ssl.truststore.location.*cannot read /no/such.p12.*--files",
        ),
        (
            TlsSettings(identity=ClientIdentity(StoreFile("o", "{p12}", "PKCS12", "wrong-pw"))),
            "is not a PKCS12 store this password opens",
        ),
        (
            TlsSettings(
                identity=ClientIdentity(
                    InlinePem("c", "{chain}"), InlinePem("kafka.ssl.keystore.key", "{key}"), "bad"
                )
            ),
            "kafka.ssl.keystore.key.*not a PEM private key",
        ),
        (
            TlsSettings(StoreFile("kafka.ssl.truststore.location", "{jks}", None)),
            "JKS.*keytool -importkeystore",
        ),
    ],
)
def test_stores_that_cannot_be_read_are_refused_naming_the_option(
    tls: TlsMaterial, tmp_path: Path, settings: TlsSettings, message: str
) -> None:
    jks = tmp_path / "store.jks"
    jks.write_bytes(JKS_MAGIC + b"\x00\x00\x00\x02")
    names = {
        "{p12}": str(tls.client_p12),
        "{chain}": tls.client_chain_pem.read_text(),
        "{key}": tls.client_key_encrypted_pem.read_text(),
        "{jks}": str(jks),
    }

    def filled(store: object) -> object:
        if isinstance(store, StoreFile):
            return StoreFile(
                store.option, names.get(store.path, store.path), store.store_type, store.password
            )
        if isinstance(store, InlinePem):
            return InlinePem(store.option, names.get(store.text, store.text))
        return store

    identity = settings.identity
    real = TlsSettings(
        filled(settings.trust),  # type: ignore[arg-type]
        None
        if identity is None
        else ClientIdentity(filled(identity.chain), filled(identity.key), identity.key_password),  # type: ignore[arg-type]
    )
    with pytest.raises(OptionError, match=message) as refused:
        tls_context(real)
    assert "wrong-pw" not in str(refused.value) and "PRIVATE KEY" not in str(refused.value)

"""unaligned.testing.tls_material: the certificates a test makes, checked by Python's own TLS
(a loopback server with the broker's certificate that requires the client's)."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12

from unaligned.testing.tls_material import make_tls_material


def test_the_server_and_client_certificates_verify_each_other(tmp_path: Path) -> None:
    tls = make_tls_material(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls.ca_pem)
    server_context.load_cert_chain(tls.server_pem)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=tls.ca_pem)
    client_context.load_cert_chain(tls.client_pem)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        peer: list[dict[str, object]] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with server_context.wrap_socket(conn, server_side=True) as tls_conn:
                peer.append(tls_conn.getpeercert() or {})
                tls_conn.sendall(b"ok")

        thread = threading.Thread(target=serve)
        thread.start()
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with client_context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                assert conn.recv(2) == b"ok"
        thread.join(5)
    subject = dict(item[0] for item in peer[0]["subject"])  # type: ignore[index]
    assert subject["commonName"] == "unaligned-client"


def test_stores_and_encrypted_key_open_with_their_passwords(tmp_path: Path) -> None:
    tls = make_tls_material(tmp_path, "sp", "kp")
    keystore = pkcs12.load_pkcs12(tls.client_p12.read_bytes(), b"sp")
    assert keystore.key is not None and len(keystore.additional_certs) == 1
    truststore = pkcs12.load_pkcs12(tls.truststore_p12.read_bytes(), b"sp")
    assert truststore.key is None and len(truststore.additional_certs) == 1
    assert load_pem_private_key(tls.client_key_encrypted_pem.read_bytes(), b"kp") is not None

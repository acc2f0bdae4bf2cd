"""Certificates made at test time for the embedded broker's TLS listeners and their clients.

:func:`make_tls_material` creates, under a directory of the caller's, a certificate authority,
a server certificate for ``127.0.0.1`` and ``localhost`` (the broker's listeners) and a client
certificate (mutual TLS), all signed by that authority, and writes them in every form a test
hands to a client or a broker:

- PEM: ``ca.pem``; ``server.pem`` and ``client.pem`` (unencrypted PKCS#8 key first, then the
  certificate chain: what a Kafka ``ssl.keystore.type=PEM`` location holds); the client's key
  also encrypted with :attr:`TlsMaterial.key_password` (``client-key-encrypted.pem``) and its
  chain alone (``client-chain.pem``);
- PKCS12: ``client.p12`` (key and chain) and ``truststore.p12`` (the authority's certificate),
  both under :attr:`TlsMaterial.store_password`, as Spark users keep them.

Nothing is committed: keys are made fresh (EC P-256, quick to make) for every test session and
are valid for a day. Needs the ``cryptography`` package (a dependency of the package: it reads
PKCS12 stores, :mod:`unaligned.kafka.login.tls_stores`).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class TlsMaterial:
    """Where :func:`make_tls_material` wrote each file, and the passwords it used."""

    directory: Path
    store_password: str
    key_password: str

    @property
    def ca_pem(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_pem(self) -> Path:
        """The broker's key (unencrypted PKCS#8) and certificate chain."""
        return self.directory / "server.pem"

    @property
    def client_pem(self) -> Path:
        """The client's key (unencrypted) and certificate chain in one file."""
        return self.directory / "client.pem"

    @property
    def client_key_encrypted_pem(self) -> Path:
        """The client's key alone, encrypted with :attr:`key_password`."""
        return self.directory / "client-key-encrypted.pem"

    @property
    def client_chain_pem(self) -> Path:
        """The client's certificate and the authority's, without the key."""
        return self.directory / "client-chain.pem"

    @property
    def client_p12(self) -> Path:
        return self.directory / "client.p12"

    @property
    def truststore_p12(self) -> Path:
        return self.directory / "truststore.p12"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    authority: bool,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=authority, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password.encode())
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def make_tls_material(
    directory: Path, store_password: str = "store-pass", key_password: str = "key-pass"
) -> TlsMaterial:
    """Make the authority, the server and the client certificates and write every file of
    :class:`TlsMaterial` into ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("unaligned test CA")
    ca = _certificate("unaligned test CA", ca_key.public_key(), ca_name, ca_key, authority=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(
        "127.0.0.1",
        server_key.public_key(),
        ca_name,
        ca_key,
        authority=False,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate(
        "unaligned-client",
        client_key.public_key(),
        ca_name,
        ca_key,
        authority=False,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    material = TlsMaterial(directory, store_password, key_password)
    material.ca_pem.write_bytes(_pem(ca))
    material.server_pem.write_bytes(_key_pem(server_key) + _pem(server) + _pem(ca))
    material.client_pem.write_bytes(_key_pem(client_key) + _pem(client) + _pem(ca))
    material.client_key_encrypted_pem.write_bytes(_key_pem(client_key, key_password))
    material.client_chain_pem.write_bytes(_pem(client) + _pem(ca))
    encryption = serialization.BestAvailableEncryption(store_password.encode())
    material.client_p12.write_bytes(
        pkcs12.serialize_key_and_certificates(b"client", client_key, client, [ca], encryption)
    )
    material.truststore_p12.write_bytes(
        pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"ca")], encryption)
    )
    return material

"""The ``kafka.ssl.*`` options, as Spark's Kafka connector takes them, read into
:class:`~unaligned.kafka.login.tls_stores.TlsSettings`.

With ``kafka.security.protocol`` ``SSL`` or ``SASL_SSL`` (any ``ssl.*`` option with another
protocol is refused: Kafka would ignore it):

- trusted certificates: ``ssl.truststore.location`` with ``ssl.truststore.type`` ``PKCS12``
  (and ``ssl.truststore.password``) or ``PEM``, or without a type (read by its content);
  ``ssl.truststore.certificates`` (PEM text, inline); or kafka-python's ``ssl.cafile``. None:
  the system's authorities.
- the client's own certificate (mutual TLS): ``ssl.keystore.location`` with
  ``ssl.keystore.type`` ``PKCS12`` (and ``ssl.keystore.password``) or ``PEM`` (key and chain in
  one file, the key decrypted by ``ssl.key.password``); ``ssl.keystore.key`` with
  ``ssl.keystore.certificate.chain`` (PEM text, inline; ``ssl.key.password`` if the key is
  encrypted); or kafka-python's ``ssl.certfile`` (and ``ssl.keyfile``).
- ``ssl.crlfile``; ``ssl.endpoint.identification.algorithm`` ``https`` (Kafka's default: the
  broker's host name is checked) or empty.

A type ``JKS`` is refused with the ``keytool`` command that converts the store; one store given
two ways is refused. The settings travel in the client kwargs as :data:`TLS_KWARG`; the
``SSLContext`` is made in each process (:mod:`unaligned.kafka.login.client_login`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unaligned.errors import OptionError
from unaligned.kafka.login.tls_stores import (
    ClientIdentity,
    InlinePem,
    Store,
    StoreFile,
    TlsSettings,
    keytool_conversion,
)
from unaligned.options.parsing import KAFKA_PREFIX

#: The client kwarg that carries :class:`TlsSettings` (not a kafka-python name).
TLS_KWARG = "tls_settings"
_TYPES = ("PEM", "PKCS12")

#: Every ``kafka.*`` name (prefix stripped) this module reads.
TLS_OPTIONS = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.cafile",
        "ssl.certfile",
        "ssl.keyfile",
        "ssl.crlfile",
    }
)


def map_tls(params: Mapping[str, str], kwargs: dict[str, Any]) -> None:
    """Put :class:`TlsSettings` for ``params`` into ``kwargs`` under :data:`TLS_KWARG` (a TLS
    protocol only); raises :class:`OptionError` naming the option that cannot work."""
    protocol = str(kwargs.get("security_protocol", "PLAINTEXT"))
    given = sorted(k for k in params if k in TLS_OPTIONS)
    if protocol not in ("SSL", "SASL_SSL"):
        if given:
            raise OptionError(
                f"option 'kafka.{given[0]}' is set but kafka.security.protocol is {protocol}: "
                "set it to SSL or SASL_SSL to connect with TLS"
            )
        return
    kwargs[TLS_KWARG] = tls_settings(params)


def tls_settings(params: Mapping[str, str]) -> TlsSettings:
    """The :class:`TlsSettings` of ``ssl.*`` settings (names without ``kafka.``): the
    client's, or those an OAuth JAAS entry gives for its token endpoint."""
    return TlsSettings(
        trust=_trust(params),
        identity=_identity(params),
        crl_file=_text(params, "ssl.crlfile"),
        check_hostname=_check_hostname(params),
    )


def _text(params: Mapping[str, str], key: str) -> str | None:
    raw = params.get(key)
    if raw is None:
        return None
    if not raw.strip():
        raise OptionError(f"option '{KAFKA_PREFIX}{key}' must not be empty")
    return raw.strip()


def _store_type(params: Mapping[str, str], store: str) -> str | None:
    raw = params.get(f"ssl.{store}.type")
    if raw is None:
        return None
    value = raw.strip().upper()
    location = params.get(f"ssl.{store}.location", "").strip()
    if value == "JKS":
        raise OptionError(
            keytool_conversion(f"kafka.ssl.{store}.location", location or f"{store}.jks")
        )
    if value not in _TYPES:
        raise OptionError(
            f"option 'kafka.ssl.{store}.type' must be PKCS12 or PEM (JKS converted with "
            f"keytool), got {raw!r}"
        )
    return value


def _one_way(params: Mapping[str, str], *keys: str) -> None:
    """Refuse one store given by more than one of ``keys``."""
    present = [k for k in keys if k in params]
    if len(present) > 1:
        names = " and ".join(f"'{KAFKA_PREFIX}{k}'" for k in present)
        raise OptionError(f"options {names} give the same store twice; set one")


def _trust(params: Mapping[str, str]) -> Store | None:
    _one_way(params, "ssl.truststore.location", "ssl.truststore.certificates", "ssl.cafile")
    store_type = _store_type(params, "truststore")
    password = params.get("ssl.truststore.password")
    if password is not None and store_type == "PEM":
        raise OptionError(
            "option 'kafka.ssl.truststore.password' cannot be used with a PEM trust store: "
            "PEM trust stores have no password"
        )
    location = _text(params, "ssl.truststore.location")
    if location is not None:
        return StoreFile(KAFKA_PREFIX + "ssl.truststore.location", location, store_type, password)
    inline = _text(params, "ssl.truststore.certificates")
    if inline is not None:
        if store_type not in (None, "PEM"):
            raise OptionError(
                "option 'kafka.ssl.truststore.certificates' holds PEM certificates: set "
                "kafka.ssl.truststore.type to PEM (or leave it unset)"
            )
        return InlinePem(KAFKA_PREFIX + "ssl.truststore.certificates", inline)
    cafile = _text(params, "ssl.cafile")
    if cafile is not None:
        return StoreFile(KAFKA_PREFIX + "ssl.cafile", cafile, "PEM")
    stray = [k for k in ("ssl.truststore.password", "ssl.truststore.type") if k in params]
    if stray:
        raise OptionError(f"option 'kafka.{stray[0]}' is set without kafka.ssl.truststore.location")
    return None


def _identity(params: Mapping[str, str]) -> ClientIdentity | None:
    _one_way(params, "ssl.keystore.location", "ssl.keystore.key", "ssl.certfile")
    store_type = _store_type(params, "keystore")
    store_password = params.get("ssl.keystore.password")
    key_password = params.get("ssl.key.password")
    location = _text(params, "ssl.keystore.location")
    if location is not None:
        option = KAFKA_PREFIX + "ssl.keystore.location"
        if store_type == "PKCS12" or (store_type is None and store_password is not None):
            opens = store_password if store_password is not None else key_password
            return ClientIdentity(StoreFile(option, location, store_type, opens))
        return ClientIdentity(
            StoreFile(option, location, store_type, store_password),
            key_password=key_password if key_password is not None else store_password,
        )
    key = _text(params, "ssl.keystore.key")
    chain = _text(params, "ssl.keystore.certificate.chain")
    if key is not None or chain is not None:
        if key is None or chain is None:
            raise OptionError(
                "options 'kafka.ssl.keystore.key' and 'kafka.ssl.keystore.certificate.chain' "
                "go together (the client's PEM key and its certificate chain)"
            )
        if store_type not in (None, "PEM"):
            raise OptionError(
                "options 'kafka.ssl.keystore.key' / '.certificate.chain' hold PEM text: set "
                "kafka.ssl.keystore.type to PEM (or leave it unset)"
            )
        return ClientIdentity(
            InlinePem(KAFKA_PREFIX + "ssl.keystore.certificate.chain", chain),
            InlinePem(KAFKA_PREFIX + "ssl.keystore.key", key),
            key_password,
        )
    certfile = _text(params, "ssl.certfile")
    if certfile is not None:
        keyfile = _text(params, "ssl.keyfile")
        return ClientIdentity(
            StoreFile(KAFKA_PREFIX + "ssl.certfile", certfile, "PEM"),
            None if keyfile is None else StoreFile(KAFKA_PREFIX + "ssl.keyfile", keyfile, "PEM"),
            key_password,
        )
    others = ("ssl.keyfile", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password")
    stray = [k for k in others if k in params]
    if stray:
        raise OptionError(
            f"option 'kafka.{stray[0]}' is set without the client's certificate "
            "(kafka.ssl.keystore.location, kafka.ssl.keystore.key, or kafka.ssl.certfile)"
        )
    return None


def _check_hostname(params: Mapping[str, str]) -> bool:
    algorithm = params.get("ssl.endpoint.identification.algorithm")
    if algorithm is None:
        return True
    lowered = algorithm.strip().lower()
    if lowered not in ("", "https"):
        raise OptionError(
            "option 'kafka.ssl.endpoint.identification.algorithm' must be 'https' or empty, "
            f"got {algorithm!r}"
        )
    return lowered == "https"

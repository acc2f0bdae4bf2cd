"""The ``kafka.sasl.*`` login options, as Kafka's Java clients take them, mapped to kafka-python.

:func:`map_sasl` reads ``sasl.mechanism`` (Kafka's default with a ``SASL_*`` protocol:
``GSSAPI``) and what each mechanism logs in with, refusing at definition what cannot work:

- ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``: ``sasl.jaas.config`` with ``PlainLoginModule``
  / ``ScramLoginModule`` ``username`` and ``password``;
- ``OAUTHBEARER``: a token source (:mod:`unaligned.kafka.login.oauth_tokens`): KIP-768's
  ``sasl.oauthbearer.token.endpoint.url`` with the client id, secret and scope as options
  (``sasl.oauthbearer.client.credentials.client.id`` / ``...client.secret``,
  ``sasl.oauthbearer.scope``) or in ``OAuthBearerLoginModule``'s JAAS entry (``clientId``,
  ``clientSecret``, ``scope``, ``extension_<name>`` SASL extensions, which Confluent Cloud
  needs, and ``ssl.truststore.*`` / ``ssl.keystore.*`` for an https token endpoint's TLS);
  the refresh and endpoint settings ``sasl.login.*``; or the package's own
  ``sasl.oauthbearer.token.provider``, an import string naming the user's provider;
- ``AWS_MSK_IAM``: ``SASL_SSL`` and botocore (``pip install 'unaligned[aws]'``); credentials and
  region come from botocore's usual chain (environment, profile, instance role) in each process;
- ``GSSAPI``: the ``gssapi`` package and a Kerberos ticket cache on every host (``kinit``); a
  keytab in the JAAS entry is refused with that advice.

The token source travels in the client kwargs as :data:`TOKEN_SOURCE_KWARG` (the provider object
is made in each process, :mod:`unaligned.kafka.login.client_login`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from unaligned.errors import OptionError
from unaligned.kafka.login.jaas_config import OPTION as JAAS_OPTION
from unaligned.kafka.login.jaas_config import JaasEntry, parse_jaas
from unaligned.kafka.login.oauth_tokens import (
    ClientCredentials,
    RefreshRule,
    TokenSource,
    UserProvider,
    load_attribute,
)
from unaligned.kafka.login.tls_options import tls_settings
from unaligned.kafka.login.tls_stores import TlsSettings
from unaligned.options.parsing import KAFKA_PREFIX, parse_duration_ms, parse_non_negative

#: The client kwarg that carries the OAUTHBEARER :class:`TokenSource` (not a kafka-python name).
TOKEN_SOURCE_KWARG = "oauth_token_source"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER", "AWS_MSK_IAM")
OAUTH_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
MSK_HANDLER = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
PROVIDER_OPTION = "sasl.oauthbearer.token.provider"

#: Every ``kafka.*`` name (prefix stripped) this module reads.
SASL_OPTIONS = frozenset(
    {
        "sasl.jaas.config",
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.scope",
        PROVIDER_OPTION,
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms",
        "sasl.login.retry.backoff.ms",
        "sasl.login.retry.backoff.max.ms",
    }
)
_OAUTH_ONLY = SASL_OPTIONS - {
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
}
#: What only a token endpoint reads (not the user's own provider).
_ENDPOINT_ONLY = _OAUTH_ONLY - {"sasl.oauthbearer.token.endpoint.url", PROVIDER_OPTION}
_KEYTAB_ADVICE = (
    "is not supported: kafka-python logs in with the Kerberos ticket cache of each process "
    "(gssapi); run `kinit -kt <keytab> <principal>` on every host of the query (or point "
    "KRB5CCNAME at a cache) and drop the option"
)
_MSK_ADVICE = (
    "is not supported: botocore's credential chain picks the credentials in each process; set "
    "AWS_PROFILE (or the role's credentials) in the environment of the driver and the "
    "executors (spark.executorEnv.AWS_PROFILE) and drop the option"
)


def map_sasl(params: Mapping[str, str], kwargs: dict[str, Any]) -> None:
    """Map the SASL options of ``params`` into ``kwargs`` (which already holds the parsed
    ``security_protocol`` and ``sasl_mechanism``); raises :class:`OptionError` naming the
    option that cannot work."""
    protocol = str(kwargs.get("security_protocol", "PLAINTEXT"))
    given = sorted(k for k in params if k in SASL_OPTIONS or k == "sasl.mechanism")
    if not protocol.startswith("SASL_"):
        if given:
            raise OptionError(
                f"option 'kafka.{given[0]}' is set but kafka.security.protocol is {protocol}: "
                "set it to SASL_SSL (or SASL_PLAINTEXT) to log in with SASL"
            )
        return
    mechanism = kwargs.setdefault("sasl_mechanism", "GSSAPI")  # Kafka's default mechanism
    jaas = parse_jaas(params["sasl.jaas.config"]) if "sasl.jaas.config" in params else None
    if mechanism != "OAUTHBEARER":
        stray = sorted(
            k for k in params if k in _OAUTH_ONLY or k == "sasl.login.callback.handler.class"
        )
        if stray:
            raise OptionError(
                f"option 'kafka.{stray[0]}' applies to kafka.sasl.mechanism=OAUTHBEARER only "
                f"(this client logs in with {mechanism})"
            )
    if mechanism != "AWS_MSK_IAM" and "sasl.client.callback.handler.class" in params:
        raise OptionError(
            "option 'kafka.sasl.client.callback.handler.class' cannot be mapped to kafka-python "
            f"(only {MSK_HANDLER} with kafka.sasl.mechanism=AWS_MSK_IAM)"
        )
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        _map_password(mechanism, jaas, kwargs)
    elif mechanism == "OAUTHBEARER":
        kwargs[TOKEN_SOURCE_KWARG] = _token_source(params, jaas)
    elif mechanism == "AWS_MSK_IAM":
        _check_msk_iam(params, protocol, jaas)
    else:
        _check_gssapi(jaas, kwargs)


def _map_password(mechanism: str, jaas: JaasEntry | None, kwargs: dict[str, Any]) -> None:
    if jaas is None:
        raise OptionError(
            f"kafka.sasl.mechanism={mechanism} needs option '{JAAS_OPTION}' with a username and "
            "password"
        )
    module = "PlainLoginModule" if mechanism == "PLAIN" else "ScramLoginModule"
    jaas.require_module(module, mechanism=mechanism)
    if "username" not in jaas.options or "password" not in jaas.options:
        raise OptionError(
            f"option '{JAAS_OPTION}' must give both username and password (value not shown)"
        )
    kwargs["sasl_plain_username"] = jaas.options["username"]
    kwargs["sasl_plain_password"] = jaas.options["password"]


def _token_source(params: Mapping[str, str], jaas: JaasEntry | None) -> TokenSource:
    """The OAUTHBEARER token source: the user's provider or client credentials (KIP-768)."""
    handler = params.get("sasl.login.callback.handler.class", "").strip()
    if handler and handler not in OAUTH_HANDLERS:
        raise OptionError(
            f"option 'kafka.sasl.login.callback.handler.class' = {handler!r} is a Java class "
            f"kafka-python cannot run; name a Python token provider with "
            f"'kafka.{PROVIDER_OPTION}' (package.module:attribute) instead"
        )
    if jaas is not None:
        jaas.require_module("OAuthBearerLoginModule", mechanism="OAUTHBEARER")
        jaas.refuse_options(
            {
                "unsecuredLoginStringClaim_sub": "(unsecured JWTs) is for tests of Java's own "
                "clients only; use a token endpoint or kafka.sasl.oauthbearer.token.provider"
            }
        )
    jaas_options = jaas.options if jaas is not None else {}
    extensions = tuple(
        sorted(
            (k[len("extension_") :], v)
            for k, v in jaas_options.items()
            if k.startswith("extension_")
        )
    )
    url = params.get("sasl.oauthbearer.token.endpoint.url", "").strip()
    provider = params.get(PROVIDER_OPTION, "").strip()
    if provider:
        if url:
            raise OptionError(
                f"options 'kafka.{PROVIDER_OPTION}' and 'kafka.sasl.oauthbearer.token.endpoint"
                ".url' both give OAUTHBEARER tokens; set one"
            )
        endpoint_only = sorted(k for k in params if k in _ENDPOINT_ONLY)
        if endpoint_only:
            raise OptionError(
                f"option 'kafka.{endpoint_only[0]}' applies to a token endpoint only "
                f"(kafka.sasl.oauthbearer.token.endpoint.url), not to 'kafka.{PROVIDER_OPTION}'"
            )
        load_attribute(provider, KAFKA_PREFIX + PROVIDER_OPTION)  # refused now if not importable
        return UserProvider(provider, extensions)
    if not url:
        raise OptionError(
            "kafka.sasl.mechanism=OAUTHBEARER needs a token source: option 'kafka.sasl."
            "oauthbearer.token.endpoint.url' (OIDC client credentials: client id, secret, "
            f"scope) or 'kafka.{PROVIDER_OPTION}' (your own provider, package.module:attribute)"
        )
    client_id = params.get(
        "sasl.oauthbearer.client.credentials.client.id", jaas_options.get("clientId")
    )
    secret = params.get(
        "sasl.oauthbearer.client.credentials.client.secret", jaas_options.get("clientSecret")
    )
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("http", "https", "file"):
        raise OptionError(
            "option 'kafka.sasl.oauthbearer.token.endpoint.url' must be an https (or http, or "
            f"file) URL, got scheme {scheme!r}"
        )
    if scheme != "file" and (not client_id or not secret):
        raise OptionError(
            "kafka.sasl.oauthbearer.token.endpoint.url needs a client id and secret: options "
            "'kafka.sasl.oauthbearer.client.credentials.client.id' and '...client.secret', or "
            f"clientId and clientSecret in '{JAAS_OPTION}'"
        )
    return ClientCredentials(
        token_endpoint_url=url,
        client_id=client_id,
        client_secret=secret,
        scope=params.get("sasl.oauthbearer.scope", jaas_options.get("scope")) or None,
        extensions=extensions,
        refresh=_refresh_rule(params),
        connect_timeout_ms=_ms(params, "sasl.login.connect.timeout.ms", 10_000),
        read_timeout_ms=_ms(params, "sasl.login.read.timeout.ms", 10_000),
        retry_backoff_ms=_ms(params, "sasl.login.retry.backoff.ms", 100),
        retry_backoff_max_ms=_ms(params, "sasl.login.retry.backoff.max.ms", 10_000),
        tls=_endpoint_tls(jaas_options, scheme),
    )


def _endpoint_tls(jaas_options: Mapping[str, str], scheme: str) -> TlsSettings | None:
    """The token endpoint's TLS from the JAAS entry's ``ssl.*`` options (Java's
    ``JaasOptionsUtils``: they apply to the endpoint only, not to the brokers)."""
    given = {k: v for k, v in jaas_options.items() if k.startswith("ssl.")}
    if not given:
        return None
    if scheme != "https":
        raise OptionError(
            f"option '{JAAS_OPTION}' gives {sorted(given)[0]} for the token endpoint, whose URL "
            "is not https"
        )
    try:
        return tls_settings(given)
    except OptionError as exc:
        raise OptionError(
            f"option '{JAAS_OPTION}', the token endpoint's TLS (ssl.* of the "
            f"OAuthBearerLoginModule entry, named below as kafka.ssl.*): {exc}"
        ) from None


def _ms(params: Mapping[str, str], key: str, default: int) -> int:
    raw = params.get(key)
    return default if raw is None else parse_duration_ms(KAFKA_PREFIX + key, raw, minimum=1)


def _refresh_rule(params: Mapping[str, str]) -> RefreshRule:
    rule = RefreshRule()
    raw_factor = params.get("sasl.login.refresh.window.factor")
    factor = rule.window_factor
    if raw_factor is not None:
        try:
            factor = float(raw_factor)
        except ValueError:
            factor = -1.0
        if not 0.5 <= factor <= 1.0:
            raise OptionError(
                "option 'kafka.sasl.login.refresh.window.factor' must be a number from 0.5 to "
                f"1.0, got {raw_factor!r}"
            )
    limits = {
        "sasl.login.refresh.buffer.seconds": 3600,
        "sasl.login.refresh.min.period.seconds": 900,
    }
    seconds = {}
    for key, most in limits.items():
        raw = params.get(key)
        seconds[key] = None if raw is None else parse_non_negative(KAFKA_PREFIX + key, raw)
        if seconds[key] is not None and seconds[key] > most:  # type: ignore[operator]
            raise OptionError(f"option 'kafka.{key}' must be at most {most}, got {raw!r}")
    buffer_s = seconds["sasl.login.refresh.buffer.seconds"]
    min_period_s = seconds["sasl.login.refresh.min.period.seconds"]
    return RefreshRule(
        factor,
        rule.buffer_s if buffer_s is None else buffer_s,
        rule.min_period_s if min_period_s is None else min_period_s,
    )


def _check_msk_iam(params: Mapping[str, str], protocol: str, jaas: JaasEntry | None) -> None:
    if protocol != "SASL_SSL":
        raise OptionError(
            f"kafka.sasl.mechanism=AWS_MSK_IAM needs kafka.security.protocol=SASL_SSL (got "
            f"{protocol}): MSK's IAM listener takes TLS only"
        )
    handler = params.get("sasl.client.callback.handler.class", MSK_HANDLER).strip()
    if handler != MSK_HANDLER:
        raise OptionError(
            f"option 'kafka.sasl.client.callback.handler.class' must be {MSK_HANDLER} (or unset) "
            "with kafka.sasl.mechanism=AWS_MSK_IAM"
        )
    if jaas is not None:
        jaas.require_module("IAMLoginModule", mechanism="AWS_MSK_IAM")
        jaas.refuse_options(
            {name: _MSK_ADVICE for name in ("awsProfileName", "awsRoleArn", "awsRoleSessionName")}
        )
    if importlib.util.find_spec("botocore") is None:
        raise OptionError(
            "kafka.sasl.mechanism=AWS_MSK_IAM needs botocore in every Python process of the "
            "query (driver and executors): pip install 'unaligned[aws]'"
        )


def _check_gssapi(jaas: JaasEntry | None, kwargs: dict[str, Any]) -> None:
    if jaas is not None:
        jaas.require_module("Krb5LoginModule", mechanism="GSSAPI")
        jaas.refuse_options(
            {name: _KEYTAB_ADVICE for name in ("useKeyTab", "keyTab", "principal", "storeKey")}
        )
        if "serviceName" in jaas.options:
            kwargs.setdefault("sasl_kerberos_service_name", jaas.options["serviceName"])
    if importlib.util.find_spec("gssapi") is None:
        raise OptionError(
            "kafka.sasl.mechanism=GSSAPI (Kerberos; Kafka's default with a SASL protocol) needs "
            "the gssapi package (pip install gssapi; it builds against the MIT Kerberos "
            "libraries, e.g. apt-get install libkrb5-dev) and a ticket cache (kinit) on every "
            "host of the query; or set kafka.sasl.mechanism to the cluster's mechanism"
        )

"""Login material made in the process that builds a client: the SSLContext and the token
provider kafka-python takes, in place of the picklable settings they come from."""

from __future__ import annotations

import pickle
import ssl

from kafka.admin import KafkaAdminClient

from unaligned.kafka.clients.client_options import client_config_from_options, kafka_python_kwargs
from unaligned.kafka.login.client_login import login_kwargs
from unaligned.kafka.login.sasl_options import TOKEN_SOURCE_KWARG
from unaligned.kafka.login.tls_options import TLS_KWARG


class _Tokens:
    def token(self) -> str:
        return "t"


def tokens() -> _Tokens:
    return _Tokens()


def test_settings_travel_pickled_and_become_a_context_and_a_provider() -> None:
    config = client_config_from_options(
        {
            "bootstrap.servers": "b:1",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.provider": f"{__name__}:tokens",
        }
    )
    kwargs = pickle.loads(pickle.dumps(config)).client_kwargs
    assert TLS_KWARG in kwargs and TOKEN_SOURCE_KWARG in kwargs
    made = login_kwargs(kwargs)
    assert isinstance(made["ssl_context"], ssl.SSLContext)
    assert made["sasl_oauth_token_provider"].token() == "t"
    assert TLS_KWARG not in made and TOKEN_SOURCE_KWARG not in made
    assert login_kwargs(kwargs)["ssl_context"] is made["ssl_context"]  # once per process
    admin = kafka_python_kwargs(kwargs, KafkaAdminClient.DEFAULT_CONFIG)
    assert set(admin) <= set(KafkaAdminClient.DEFAULT_CONFIG)
    assert admin["ssl_context"] is made["ssl_context"]

"""``kafka.sasl.jaas.config``: the one JAAS entry Kafka's Java clients take, parsed.

The value is one login module entry, ``<module> <flag> key="value" ...;`` (values double- or
single-quoted, or bare words). :func:`parse_jaas` returns :class:`JaasEntry`: the module's short
name (``PlainLoginModule``, ``ScramLoginModule``, ``OAuthBearerLoginModule``,
``IAMLoginModule``, ``Krb5LoginModule``) and its options. Messages never show the value (it
holds passwords and client secrets).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from unaligned.errors import OptionError

OPTION = "kafka.sasl.jaas.config"
_ENTRY = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\b"
    r"(?P<opts>.*?);?\s*$",
    re.S,
)
_OPTION = re.compile(r"""([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s;"']+))""")

#: Each module's full names as Kafka's and the vendors' docs give them.
MODULES: Mapping[str, str] = {
    "PlainLoginModule": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "ScramLoginModule": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAuthBearerLoginModule": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
    "IAMLoginModule": "software.amazon.msk.auth.iam.IAMLoginModule",
    "Krb5LoginModule": "com.sun.security.auth.module.Krb5LoginModule",
}


@dataclass(frozen=True)
class JaasEntry:
    """One parsed entry: ``module`` is the short class name."""

    module: str
    options: Mapping[str, str] = field(repr=False)

    def require_module(self, *allowed: str, mechanism: str) -> None:
        """Refuse an entry whose module does not log in with ``mechanism``."""
        if self.module not in allowed:
            raise OptionError(
                f"option '{OPTION}' uses {self.module}, which does not log in with "
                f"kafka.sasl.mechanism={mechanism}; use {' or '.join(allowed)}"
            )

    def refuse_options(self, names: Mapping[str, str]) -> None:
        """Refuse each option of ``names`` the entry sets, with that option's advice."""
        for name, advice in names.items():
            if name in self.options:
                raise OptionError(f"option '{OPTION}': {self.module} option {name} {advice}")


def parse_jaas(text: str) -> JaasEntry:
    """Parse one JAAS entry (module docstring); :class:`OptionError` without the value."""
    match = _ENTRY.match(text)
    if match is None:
        raise OptionError(
            f"option '{OPTION}' is not a JAAS entry like "
            '\'<LoginModule> required username="..." password="...";\' (value not shown)'
        )
    options: dict[str, str] = {}
    for m in _OPTION.finditer(match.group("opts")):
        double, single, bare = m.group(2), m.group(3), m.group(4)
        if double is not None:
            options[m.group(1)] = double.replace('\\"', '"')
        elif single is not None:
            options[m.group(1)] = single.replace("\\'", "'")
        else:
            options[m.group(1)] = bare
    return JaasEntry(match.group("module").rsplit(".", 1)[-1], options)

"""Where a table's files live, as a ``pyarrow.fs`` filesystem: tasks write there, the driver
checks and removes there.

:class:`TableStorage` is picklable (a URI and the storage properties): a task rebuilds the
filesystem in its own process. Local paths and ``file:`` URIs use the local filesystem; ``s3://``
(``s3a://``) uses pyarrow's S3 client with the endpoint, keys and region taken from Delta's
storage options (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ALLOW_HTTP``) or Iceberg's FileIO properties (``s3.endpoint``,
``s3.access-key-id``, ``s3.secret-access-key``, ``s3.region``), so one set of properties
serves the table library and the sink's own file handling alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pyarrow.fs as pafs

from unaligned.errors import TableUnavailableError

_S3_KEYS = {
    "endpoint": ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "s3.endpoint"),
    "access_key": ("AWS_ACCESS_KEY_ID", "s3.access-key-id"),
    "secret_key": ("AWS_SECRET_ACCESS_KEY", "s3.secret-access-key"),
    "session_token": ("AWS_SESSION_TOKEN", "s3.session-token"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION", "s3.region"),
}


@dataclass(frozen=True)
class TableStorage:
    """The filesystem of a table location ``uri`` with ``properties`` (see the module)."""

    uri: str
    properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def filesystem(self) -> pafs.FileSystem:
        scheme = urlparse(self.uri).scheme
        if scheme in ("", "file"):
            return pafs.LocalFileSystem()
        if scheme in ("s3", "s3a", "s3n"):
            return self._s3()
        try:
            fs, _ = pafs.FileSystem.from_uri(self.uri)
        except (ValueError, OSError) as exc:
            raise TableUnavailableError(
                f"cannot open the table location {self.uri!r}: {exc}"
            ) from exc
        return fs

    def _s3(self) -> pafs.S3FileSystem:
        props = dict(self.properties)
        found = {name: _first(props, keys) for name, keys in _S3_KEYS.items()}
        kwargs: dict[str, str] = {}
        endpoint = found.pop("endpoint")
        if endpoint:
            parsed = urlparse(endpoint)
            kwargs["endpoint_override"] = parsed.netloc or parsed.path
            kwargs["scheme"] = parsed.scheme or "https"
        return pafs.S3FileSystem(**kwargs, **{k: v for k, v in found.items() if v})

    def path(self, uri: str | None = None) -> str:
        """``uri`` (default: the table's) as a path of :meth:`filesystem`."""
        parsed = urlparse(uri or self.uri)
        if parsed.scheme in ("", "file"):
            return parsed.path if parsed.scheme else (uri or self.uri)
        return f"{parsed.netloc}{parsed.path}"

    def uri_of(self, path: str) -> str:
        """The URI of a path of :meth:`filesystem` below the table (the inverse of :meth:`path`)."""
        parsed = urlparse(self.uri)
        if parsed.scheme in ("", "file"):
            return f"file://{path}" if parsed.scheme else path
        return f"{parsed.scheme}://{path}"

    def child(self, relative: str) -> str:
        return f"{self.path().rstrip('/')}/{relative}"


def _first(props: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    lowered = {k.lower(): v for k, v in props.items()}
    for key in keys:
        value = lowered.get(key.lower())
        if value:
            return value
    return None

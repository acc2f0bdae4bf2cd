"""A registered Protobuf schema loaded into a descriptor pool of its own, and its messages found
by Confluent's message indexes or by name.

The registry holds a Protobuf schema in one of two forms, and :class:`Compiled` takes both (a
schema and each of its references alike):

- ``.proto`` text (what Confluent's Java serializer, Confluent's registry and our sink
  register): compiled by ``protoc`` (``grpcio-tools`` ships it, ``pip install
  'unaligned[protobuf]'``), run in process on a temporary directory;
- a serialized ``FileDescriptorProto`` in base64 (what Confluent's Python, Go and .NET
  serializers register, and what a registry that keeps schemas as sent, Apicurio's, returns):
  loaded straight into the pool, no ``protoc``. Text is told apart by its characters: base64
  has no ``;``, ``{`` or spaces, ``.proto`` text cannot do without them.

Imports that no reference holds (``google/protobuf/*.proto``: Confluent's serializers skip the
well-known types) come from the ``protobuf`` package's own descriptors. :func:`compiled` keeps
one :class:`Compiled` per schema and process.
"""

from __future__ import annotations

import base64
import importlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import MissingExtraError, RecordFormatError
from unaligned.registry.connection.schemas import ResolvedSchema

EXTRA = "pip install 'unaligned[protobuf]'"
#: The name the schema's own file gets when it is ``.proto`` text (its imports keep theirs).
MAIN = "unaligned_schema.proto"
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


def _modules() -> tuple[Any, Any, Any]:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise MissingExtraError(f"protobuf-confluent needs the protobuf package: {EXTRA}") from None
    return descriptor_pb2, descriptor_pool, message_factory


def is_serialized(text: str) -> bool:
    """Whether a registered Protobuf schema is a base64 ``FileDescriptorProto`` (module
    docstring), not ``.proto`` text."""
    return bool(_BASE64.fullmatch(text)) and not text.strip().startswith("syntax")


class Compiled:
    """A schema's descriptors in a pool of their own, and its messages' classes."""

    def __init__(self, resolved: ResolvedSchema) -> None:
        descriptor_pb2, descriptor_pool, message_factory = _modules()
        protos = _file_protos(resolved, descriptor_pb2)
        self.pool = descriptor_pool.DescriptorPool()
        _add_in_order(self.pool, protos, descriptor_pb2)
        self.file_proto = protos[-1]
        self.main = self.pool.FindFileByName(self.file_proto.name)
        self._factory = message_factory

    def message(self, path: tuple[int, ...]) -> Any:
        """The descriptor of the message at Confluent's message index ``path``. Raises
        ``IndexError`` when the file has no such message."""
        if not path or min(path) < 0:
            raise IndexError(path)
        proto = self.file_proto.message_type[path[0]]
        names = [proto.name]
        for index in path[1:]:
            proto = proto.nested_type[index]
            names.append(proto.name)
        package = self.file_proto.package
        return self.pool.FindMessageTypeByName(".".join([package, *names] if package else names))

    def path_of(self, full_name: str) -> tuple[int, ...]:
        """Confluent's message indexes of the message ``full_name`` in this file."""
        package = self.file_proto.package
        relative = full_name[len(package) + 1 :] if package else full_name
        path: list[int] = []
        protos = self.file_proto.message_type
        for part in relative.split("."):
            index = next(i for i, p in enumerate(protos) if p.name == part)
            path.append(index)
            protos = protos[index].nested_type
        return tuple(path)

    def message_named(self, name: str | None) -> Any:
        """The message ``name`` (its full name, or its name within the file's package, nested
        ones as ``Outer.Inner``); ``None``: the file's first message. Raises
        :class:`RecordFormatError` naming the messages the file has."""
        if name is None:
            if not self.file_proto.message_type:
                raise RecordFormatError("the Protobuf schema declares no message")
            return self.message((0,))
        package = self.file_proto.package
        for candidate in (name, f"{package}.{name}" if package else name):
            try:
                found = self.pool.FindMessageTypeByName(candidate)
            except KeyError:
                continue
            if found.file.name == self.main.name:
                return found
        known = ", ".join(sorted(self.message_names()))
        raise RecordFormatError(
            f"the Protobuf schema has no message {name!r}; its messages: {known}"
        )

    def message_names(self) -> list[str]:
        names: list[str] = []

        def visit(descriptor: Any) -> None:
            names.append(descriptor.full_name)
            for nested in descriptor.nested_types:
                if not nested.GetOptions().map_entry:
                    visit(nested)

        for descriptor in self.main.message_types_by_name.values():
            visit(descriptor)
        return names

    def message_class(self, descriptor: Any) -> Any:
        return self._factory.GetMessageClass(descriptor)


_COMPILED: ProcessMemo[ResolvedSchema, Compiled] = ProcessMemo()


def compiled(resolved: ResolvedSchema) -> Compiled:
    return _COMPILED.get_or_compute(resolved, lambda: Compiled(resolved))


def message_index_bytes(path: tuple[int, ...]) -> bytes:
    """Confluent's encoding of message indexes: ``0`` alone for ``(0,)``, else a zigzag varint
    count and the zigzag varint indexes."""
    if path == (0,):
        return b"\x00"
    out = bytearray()
    for value in (len(path), *path):
        zigzag = (value << 1) ^ (value >> 63)
        while True:
            byte = zigzag & 0x7F
            zigzag >>= 7
            out.append(byte | (0x80 if zigzag else 0))
            if not zigzag:
                break
    return bytes(out)


# --- loading ----------------------------------------------------------------------------------


def _file_protos(resolved: ResolvedSchema, descriptor_pb2: Any) -> list[Any]:
    """Every file of the schema as a ``FileDescriptorProto``, the schema's own last."""
    files = [*resolved.referenced, (MAIN, resolved.schema)]
    serialized: dict[str, Any] = {}
    texts: list[tuple[str, str]] = []
    for name, schema in files:
        if is_serialized(schema.text):
            try:
                proto = descriptor_pb2.FileDescriptorProto.FromString(
                    base64.b64decode(schema.text, validate=False)
                )
            except Exception as exc:  # protobuf's DecodeError, binascii.Error
                raise RecordFormatError(
                    f"{resolved.describe()}: {name} is neither .proto text nor a serialized "
                    f"FileDescriptorProto: {exc}"
                ) from None
            if name != MAIN or not proto.name:
                proto.name = name
            serialized[proto.name] = proto
        else:
            texts.append((name, schema.text))
    protos = dict(serialized)
    if texts:
        compiled_set = descriptor_pb2.FileDescriptorSet.FromString(
            _protoc(resolved, texts, list(serialized.values()), descriptor_pb2)
        )
        for proto in compiled_set.file:
            protos.setdefault(proto.name, proto)
    main_name = MAIN if texts and texts[-1][0] == MAIN else list(serialized)[-1]
    main = protos.pop(main_name)
    return [*protos.values(), main]


def _add_in_order(pool: Any, protos: list[Any], descriptor_pb2: Any) -> None:
    """Add ``protos`` to ``pool``, each after its imports (well-known ones from the
    ``protobuf`` package when no file holds them)."""
    pending = {p.name: p for p in protos}
    added: set[str] = set()

    def add(name: str, trail: tuple[str, ...]) -> None:
        if name in added:
            return
        proto = pending.get(name) or _bundled(name, descriptor_pb2)
        if proto is None:
            raise RecordFormatError(
                f"the Protobuf schema imports {name!r}, which neither its references nor the "
                "protobuf package hold (register it and name it as a reference)"
            )
        if name in trail:
            raise RecordFormatError(f"the Protobuf schema's imports form a cycle at {name!r}")
        for dependency in proto.dependency:
            add(dependency, (*trail, name))
        pool.Add(proto)
        added.add(name)

    for proto in protos:
        add(proto.name, ())


def _bundled(name: str, descriptor_pb2: Any) -> Any:
    """A well-known type's file (``google/protobuf/x.proto``) from the protobuf package."""
    match = re.fullmatch(r"google/protobuf/(\w+)\.proto", name)
    if match is None:
        return None
    try:
        module = importlib.import_module(f"google.protobuf.{match.group(1)}_pb2")
    except ImportError:
        return None
    return descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)


def _protoc(
    resolved: ResolvedSchema, texts: list[tuple[str, str]], given: list[Any], descriptor_pb2: Any
) -> bytes:
    """``protoc --include_imports --descriptor_set_out`` of the ``.proto`` texts, the
    serialized files given as ``--descriptor_set_in``."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise MissingExtraError(
            f"protobuf-confluent compiles the registry's .proto text with protoc: {EXTRA}"
        ) from None
    include = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="unaligned-proto-") as work:
        root = Path(work)
        for name, text in texts:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        args = ["protoc", f"-I{root}", f"-I{include}", "--include_imports"]
        if given:
            known = root / "given.pb"
            known.write_bytes(descriptor_pb2.FileDescriptorSet(file=given).SerializeToString())
            args.append(f"--descriptor_set_in={known}")
        out, log = root / "out.pb", root / "protoc.log"
        args += [f"--descriptor_set_out={out}", *(str(root / name) for name, _ in texts)]
        saved = os.dup(2)
        try:
            with open(log, "wb") as sink:
                os.dup2(sink.fileno(), 2)
                code = protoc.main(args)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if code != 0:
            raise RecordFormatError(
                f"protoc cannot compile {resolved.describe()}: "
                + log.read_text(errors="replace").replace(str(root) + "/", "").strip()
            )
        return out.read_bytes()

"""Protobuf registry data (the ``protobuf`` extra): :mod:`.protobuf_schema` loads ``.proto``
text and serialized descriptors into a descriptor pool, :mod:`.proto_text` writes ``.proto``
text for the sink's registration, :mod:`.protobuf_format` decodes and encodes messages."""

"""Schema Registry formats: Confluent-framed Avro, JSON Schema and Protobuf as typed columns.

- :mod:`.options`: the source's and the sink's format options (frozen dataclasses);
  :mod:`.registry_settings`: where the registry is and how to log in.
- :mod:`.client`: the registry's REST API (stdlib HTTP; basic auth, bearer token, OAuth client
  credentials with :mod:`.oauth_token`, TLS; retries until the registry timeout).
- :mod:`.schemas`: reader schemas resolved when a query starts, writer schemas fetched once per
  id and worker process.
- :mod:`.framing`: the magic byte, the schema id and Protobuf's message indexes, column-wise;
  :mod:`.header_ids`: schema ids (or GUIDs) carried in a record header instead.
- :mod:`.avro_schema`, :mod:`.avro_vectors`, :mod:`.avro_decoder` (with :mod:`.avro_blocks`,
  :mod:`.avro_defaults`): Avro mapped to Spark types and decoded column-wise with numpy (schema
  resolution across writer ids); :mod:`.avro_encoder`: the sink's Avro.
- :mod:`.json_format`, :mod:`.protobuf_format` (with :mod:`.protobuf_schema`, which loads
  ``.proto`` text and serialized descriptors, and :mod:`.proto_text`): JSON Schema and Protobuf
  (optional extras).
- :mod:`.record_types`: several record types in one column (one struct field per type).
- :mod:`.codecs`: one decoder per (format, reader, writer) and process.
- :mod:`.record_decoding`: the driver's reader schemas and the decoded columns' Spark types;
  :mod:`.batch_decoding`: the source's read tasks turn a Kafka batch's ``key``/``value`` into
  typed columns; :mod:`.record_encoding`: the sink's tasks encode them.
"""

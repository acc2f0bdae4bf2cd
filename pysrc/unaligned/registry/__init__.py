"""Schema Registry formats: Confluent-framed Avro, JSON Schema and Protobuf as typed columns.

- :mod:`.options`, :mod:`.option_specs`: the source's and the sink's format options.
- :mod:`.connection`: where the registry is and how to log in, its REST API, and the schemas
  resolved when a query starts or fetched once per id and worker process.
- :mod:`.framing`: the magic byte, the schema id and Protobuf's message indexes, column-wise;
  :mod:`.header_ids`: schema ids (or GUIDs) carried in a record header instead.
- :mod:`.avro`: Avro mapped to Spark types, decoded column-wise with numpy (schema resolution
  across writer ids) and encoded for the sink; :mod:`.json_format` and :mod:`.protobuf`:
  JSON Schema and Protobuf (optional extras).
- :mod:`.record_types`: several record types in one column (one struct field per type).
- :mod:`.codecs`: one decoder per (format, reader, writer) and process.
- :mod:`.record_decoding`: the driver's reader schemas and the decoded columns' Spark types;
  :mod:`.batch_decoding`: the source's read tasks turn a Kafka batch's ``key``/``value`` into
  typed columns; :mod:`.record_encoding`: the sink's tasks encode them.
"""

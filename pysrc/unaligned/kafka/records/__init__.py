"""Kafka record batches (format v2, and v0/v1 message sets when reading): their byte layout,
decoding into Arrow columns with numpy (:mod:`.record_decoder`, :mod:`.record_scan`,
:mod:`.record_fields`, :mod:`.record_columns`), and encoding Arrow rows into batches
(:mod:`.record_encoder`)."""

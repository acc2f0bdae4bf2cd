"""Avro registry data: :mod:`.schema` maps Avro to Spark types; :mod:`.vectors`,
:mod:`.decoder` (with :mod:`.blocks` for arrays and maps and :mod:`.defaults` for reader
defaults) decode a column of records with numpy, resolving each writer schema against the
reader's; :mod:`.encoder` writes the sink's Avro."""

"""Channel state: the rows a barrier overtook, snapshotted as Avro with the checkpoint.

- :mod:`.refs`: references to state, carried from the commit message to the commit record.
- :mod:`.format`: the Avro file's header and the checks made before a row is replayed.
- :mod:`.writer` / :mod:`.reader`: writing the state as a streamed Avro file; replaying it.
- :mod:`.replay_schema`: replaying into a sink input whose columns changed (by name).
- :mod:`.files`: per-query directories, per-attempt names, listing and deletion.
- :mod:`.avro_rows`: Arrow rows <-> Avro, column-wise.
"""

"""Channel state: the rows a barrier overtook, snapshotted as Avro with the checkpoint.

- :mod:`.refs`: references to state, carried from the commit message to the commit record.
- :mod:`.format`: the Avro file's header and the checks made before a row is replayed.
- :mod:`.writer` / :mod:`.reader`: writing the state as a streamed Avro file; replaying it.
- :mod:`.files`: names, listing and deletion under the state directory.
- :mod:`.avro_rows`: Arrow rows <-> Avro, column-wise.
"""

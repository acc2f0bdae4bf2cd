"""Channel state: the rows a barrier overtook, snapshotted as Avro with the checkpoint.

- :mod:`.refs`: references to state, carried from the commit message to the commit record.
- :mod:`.writer` / :mod:`.reader`: the streamed Avro file and its checks.
- :mod:`.files`: names, listing and deletion under the state directory.
- :mod:`.avro_rows`: Arrow rows <-> Avro, column-wise.
"""

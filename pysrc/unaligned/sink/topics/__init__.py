"""The Kafka target of the sink: output topics written in Kafka transactions.

:mod:`.kafka_participant` is the target (pre-commit a prepared transaction per task, commit it
on the driver; cluster checks in :mod:`.kafka_checks`, transactional ids from
:mod:`.kafka_id_pool`, prepared transactions as commit-record items in :mod:`.kafka_items`).
Tasks write through :mod:`.kafka_task_writer`, which cuts rows into record batches with
:mod:`.kafka_batches` from the input columns of :mod:`.kafka_columns`.
"""

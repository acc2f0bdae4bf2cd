"""The Iceberg and Delta participants of the two-phase-commit sink: one table commit per batch.

Tasks write Parquet data files into the table's location (one file per partition value, with
the column statistics the format keeps, computed in the task: :mod:`.data_file_writer` with a
format's :mod:`.delta_layout` / :mod:`.iceberg_layout`); their commit messages carry the files;
the driver commits every file of a decided batch in one table commit stamped with the query id
and batch id, after checking the table does not hold the batch already (:mod:`.delta_table`,
:mod:`.iceberg_table`, shared steps :mod:`.table_participant`). Files no decision names are
removed (:mod:`.leftover_files`). pyiceberg and deltalake are optional extras, imported only
where a table target runs.
"""

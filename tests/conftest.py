"""Fast unit tests: no broker and no Spark session."""

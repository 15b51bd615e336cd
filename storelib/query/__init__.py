"""Finding and reading messages: point look-ups by id, key, unique key and time; filtered reads of a
topic (the two-stage filter as Spark jobs); the tables as DataFrames."""

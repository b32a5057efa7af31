"""What every stage stands on: the Spark session and its jars, the data contracts, the
table registry, Delta writes, progress lines, and SQL with the saved queries.

Imports rmqlib only; no stage."""

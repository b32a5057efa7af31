"""Stage 5, report: the nightly HTML page per snapshot and the index over a broker's pages.

Imports the stages below (lakehouse to alerts) and rmqlib."""

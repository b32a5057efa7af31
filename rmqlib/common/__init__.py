"""What every store-file decoder shares: byte accounting (every byte decoded, blank,
zero tail or unreadable), mapped-file queue directories (files named by start offset),
fixed-unit file reads, and the Java string hashes the broker stores.

Imports only ``rmqlib.errors``."""

"""Stage 4, alerts: thresholds and the one alert per (broker, snapshot) with its channels and
the ``alerts`` table (``evaluation``); the alert for failed or killed tasks (``failures``).

Imports the stages below (lakehouse to check) and rmqlib."""

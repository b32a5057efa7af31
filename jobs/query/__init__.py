"""SQL over the lakehouse tables: the saved queries, the two engines that run them (in
process with DataFusion over delta-rs, or Spark), how results print, the interactive shell."""

"""Table maintenance: compaction, VACUUM and checkpoints that keep a night's cost flat."""

"""How long a VACUUM leaves the files a table no longer names: ``time_travel_days``.

A reader (a check's views, a query, a load reading the previous night's marks) lists a
table's files once, at the version it opened, and reads them afterwards. A VACUUM that
deletes the files a compaction just replaced, with no time travel kept, deletes files such a
reader may still have to read (tests/test_maintenance_races.py shows it failing). So the
config and the maintenance both refuse less than a day, saying why.
"""

MIN_TIME_TRAVEL_DAYS = 1
VACUUM_SAFETY = ("a VACUUM must never remove files that a load or query still running may "
                 "read")

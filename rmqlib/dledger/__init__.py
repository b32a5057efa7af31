"""DLedger commitlogs (``enableDLegerCommitLog=true``): entries, index units, checkpoint.

``layout`` holds the byte layout and its sources, ``entries`` walks the data files. Above
``commitlog/`` (an entry's body is one commitlog record), below ``store/``.
"""

"""Byte layout of a DLedger commitlog (``enableDLegerCommitLog=true``): entries and index.

A broker in DLedger mode keeps no ``commitlog/``: its messages live in the Raft log of
OpenMessaging DLedger (the version RocketMQ 4.5+ and 5.x depend on; 5.5.0: dledger 0.3.2),
under ``<storePathRootDir>/dledger-<selfId>/``:

``data/``   mapped files named by their start offset (20 digits, like the commitlog;
            ``mappedFileSizeForEntryData``, 1 GiB by default), holding *entries*;
``index/``  mapped files of 32-byte *index units*, unit i describing entry index i;
``checkpoint``  Java properties text: ``endIndex``, ``committedIndex``;
``currterm``    Java properties text: ``currTerm``, ``voteLeader``.

Every integer is big-endian and signed. An entry (``DLedgerEntryCoder.encode``)::

    0  MAGIC i32        (1)           24 POS i64      (the entry's own data offset)
    4  SIZE i32         (whole entry) 32 CHANNEL i32
    8  INDEX i64        (Raft index)  36 CHAIN CRC i32
    16 TERM i64         (Raft term)   40 BODY CRC i32
                                      44 BODY SIZE i32, then BODY (SIZE - 48 bytes)

In RocketMQ's ``DLedgerCommitLog`` the body is one ordinary commitlog record (spec §2),
whose PHYSICALOFFSET is the entry's POS + 48: consume queues and msgIds point at the body.

An index unit (``DLedgerEntryCoder.encodeIndex``)::

    0 MAGIC i32   4 POS i64   12 SIZE i32   16 INDEX i64   24 TERM i64

A data file ends with a BLANK when the next entry plus 8 bytes no longer fits
(``MmapFileList.preAppend``): MAGIC -1, then the bytes left in the file as i32; the rest of
the file is zeros. (The commitlog's BLANK has its two fields the other way round.) Index
files get no BLANK: units tile them.

Sources: openmessaging/dledger ``entry/DLedgerEntry.java`` (POS_OFFSET 24, HEADER_SIZE
44, BODY_OFFSET 48), ``entry/DLedgerEntryCoder.java``, ``store/file/DLedgerMmapFileStore.java``
(MAGIC_1, INDEX_UNIT_SIZE 32, checkpoint keys), ``store/file/MmapFileList.java``
(BLANK_MAGIC_CODE -1, MIN_BLANK_LEN 8), ``DLedgerConfig.java`` (paths, file sizes).
"""

from __future__ import annotations

import struct

ENTRY_MAGIC = 1                 # DLedgerMmapFileStore.MAGIC_1 = CURRENT_MAGIC
BLANK_MAGIC = -1                # MmapFileList.BLANK_MAGIC_CODE
MIN_BLANK_LENGTH = 8            # MmapFileList.MIN_BLANK_LEN
ENTRY_HEADER = struct.Struct(">iiqqqiiii")  # magic size index term pos channel chain body bodysize
ENTRY_HEADER_SIZE = ENTRY_HEADER.size       # 48 = DLedgerEntry.BODY_OFFSET
POS_OFFSET = 24                              # DLedgerEntry.POS_OFFSET
INDEX_UNIT = struct.Struct(">iqiqq")         # magic pos size index term
INDEX_UNIT_SIZE = INDEX_UNIT.size            # 32 = DLedgerMmapFileStore.INDEX_UNIT_SIZE
BLANK_HEAD = struct.Struct(">ii")            # magic (-1), bytes left in the file

DATA_DIR, INDEX_DIR = "data", "index"
CHECKPOINT_FILE, TERM_FILE = "checkpoint", "currterm"
DIR_PREFIX = "dledger-"                      # DLedgerConfig.getDefaultPath: dledger-<selfId>

assert ENTRY_HEADER_SIZE == 48 and INDEX_UNIT_SIZE == 32

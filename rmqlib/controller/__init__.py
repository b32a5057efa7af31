"""Controller mode (5.x automatic master/slave switch): the two kinds of file it adds.

A broker with ``enableControllerMode=true`` writes, directly under its store root,
``epochFileCheckpoint`` (+ ``.bak``: the master terms its commitlog was written in,
:mod:`rmqlib.controller.epochs`) and ``brokerIdentity`` (+ ``brokerIdentity-temp`` while
registering: its controller-assigned replica id, :mod:`rmqlib.controller.identity`).
Nothing else in the store changes; the SyncStateSet lives in memory and in the controller.
Beside ``checkpoint`` and ``config``: imports only ``errors`` and ``common``.
"""

from rmqlib.controller.epochs import (
    BAK_SUFFIX,
    EPOCH_FILE,
    LAST_EPOCH_END_OFFSET,
    EpochEntry,
    EpochFile,
    EpochFileCopy,
    Finding,
    SkippedLine,
    check_epochs,
    decode_epoch_bytes,
    encode_epoch_file,
    epoch_at,
    read_epoch_file,
)
from rmqlib.controller.identity import (
    FIRST_BROKER_CONTROLLER_ID,
    IDENTITY_FILE,
    TEMP_IDENTITY_FILE,
    BrokerIdentity,
    check_identity,
    decode_identity_bytes,
    read_broker_identity,
)

__all__ = [
    "BAK_SUFFIX",
    "EPOCH_FILE",
    "FIRST_BROKER_CONTROLLER_ID",
    "IDENTITY_FILE",
    "LAST_EPOCH_END_OFFSET",
    "TEMP_IDENTITY_FILE",
    "BrokerIdentity",
    "EpochEntry",
    "EpochFile",
    "EpochFileCopy",
    "Finding",
    "SkippedLine",
    "check_epochs",
    "check_identity",
    "decode_epoch_bytes",
    "decode_identity_bytes",
    "encode_epoch_file",
    "epoch_at",
    "read_broker_identity",
    "read_epoch_file",
]

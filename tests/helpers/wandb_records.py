"""Reads a W&B offline run file (run-<id>.wandb) record by record, as W&B's own sync does, to
check that a run's record is valid and what it holds.

The format is LevelDB's log format with W&B's header: a 7-byte header (":W&B", magic 0xBEE1,
version 0), then 32 KiB blocks of chunks, each with a 7-byte header (CRC-32 of type and data,
length, type: full, first, middle, last); a chunk never straddles a block. Each assembled
record is a protobuf `wandb.proto.wandb_internal_pb2.Record`. A torn or corrupt file raises.
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class CorruptRecord(ValueError):
    pass


def records(path: Path) -> list[wandb_internal_pb2.Record]:
    data = Path(path).read_bytes()
    if data[:7] != HEADER:
        raise CorruptRecord(f"{path}: no W&B header")
    offset, pending, found = 7, b"", []
    while offset + 7 <= len(data):
        room = BLOCK - offset % BLOCK
        if room < 7:  # the rest of a block too short for a chunk header is padding
            offset += room
            continue
        checksum, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        chunk = data[offset + 7:offset + 7 + length]
        if len(chunk) != length:
            raise CorruptRecord(f"{path}: chunk cut at byte {offset}")
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            raise CorruptRecord(f"{path}: bad checksum at byte {offset}")
        offset += 7 + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            found.append(record)
            pending = b""
    return found

"""Bags read message by message with rosbags: sqlite3 files, and bag directories whose
files rosbags must decompress (rosbag2's file and message compression)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rosbags.interfaces import ConnectionExtRosbag2, MessageDefinitionFormat
from rosbags.rosbag2 import Reader

from sim_real_bridge.offline.bags.raw import CDR, ChannelInfo, RawMessages

_FORMATS = {MessageDefinitionFormat.MSG: "ros2msg", MessageDefinitionFormat.IDL: "ros2idl"}


class RosbagsStorage:
    """A bag opened with rosbags' Reader.

    Raises:
        rosbags' ReaderError, OSError: the bag cannot be opened.
    """

    def __init__(self, path: Path, label: str) -> None:
        self.label = label
        self.reader = Reader(path)
        self.reader.open()
        self.channels = {
            conn.id: ChannelInfo(
                conn.id, conn.topic, conn.msgtype,
                conn.ext.serialization_format if isinstance(conn.ext, ConnectionExtRosbag2) else CDR,
                _FORMATS.get(conn.msgdef.format, ""), conn.msgdef.data or "", conn.msgcount)
            for conn in self.reader.connections
        }
        self.message_count = self.reader.message_count

    def time_range_ns(self) -> tuple[int, int] | None:
        """(first, last) log time, None without messages."""
        if not self.message_count:
            return None
        return self.reader.start_time, self.reader.end_time - 1

    def read(self, wanted: Mapping[int, str], start_ns: int | None, stop_ns: int | None
             ) -> dict[str, list[RawMessages]]:
        """Raw messages of the ``wanted`` connections (id -> logical topic) in [start_ns, stop_ns)."""
        connections = [conn for conn in self.reader.connections if conn.id in wanted]
        if not connections:
            return {}
        found: dict[str, tuple[list[int], list[bytes]]] = {topic: ([], []) for topic in wanted.values()}
        for conn, log_ns, data in self.reader.messages(connections, start_ns, stop_ns):
            times, datas = found[wanted[conn.id]]
            times.append(log_ns)
            datas.append(data)
        return {topic: [RawMessages.of(times, datas)] for topic, (times, datas) in found.items() if times}

    def close(self) -> None:
        self.reader.close()

"""What a storage file gives: its channels, and its messages' bytes in one buffer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

CDR = "cdr"


@dataclass(frozen=True)
class ChannelInfo:
    """One channel (rosbags: connection) of a storage file.

    Attributes:
        id: the channel's id in its file.
        topic: the topic as recorded.
        msgtype: e.g. ``sensor_msgs/msg/JointState`` (MCAP: the schema name).
        encoding: how messages are serialized (``cdr`` for ROS 2; MCAP also knows json, protobuf, ...).
        definition_format: ``ros2msg``, ``ros2idl`` or another schema encoding ('' when none).
        definition: the message definition the file carries ('' when none).
        message_count: messages of this channel in the file.
    """

    id: int
    topic: str
    msgtype: str
    encoding: str
    definition_format: str
    definition: str
    message_count: int


@dataclass(frozen=True)
class RawMessages:
    """Serialized messages of one topic in one byte buffer: message i, logged at
    ``recv_ns[i]``, is ``buf[start[i] : start[i] + size[i]]`` (int64 arrays)."""

    recv_ns: np.ndarray
    buf: np.ndarray
    start: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return int(self.size.shape[0])

    def payload(self, i: int) -> bytes:
        """The bytes of message ``i``."""
        start = int(self.start[i])
        return self.buf[start : start + int(self.size[i])].tobytes()

    def rows(self, index: np.ndarray, size: int) -> np.ndarray:
        """Messages ``index`` (all ``size`` bytes long) as a (len(index),) array of
        ``size``-byte void items: one copy per message, ready to view with a structured dtype."""
        items = np.ndarray((max(self.buf.size - size + 1, 0),), dtype=np.dtype((np.void, size)), buffer=self.buf,
                           strides=(1,))
        return items[self.start[index]]

    @classmethod
    def of(cls, recv_ns: Sequence[int], datas: Sequence[bytes]) -> RawMessages:
        """Messages given one by one."""
        size = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        buf = np.frombuffer(b"".join(datas), dtype=np.uint8)
        return cls(np.asarray(recv_ns, dtype=np.int64).reshape(-1), buf, np.cumsum(size) - size, size)

    @classmethod
    def concat(cls, parts: Sequence[RawMessages]) -> RawMessages:
        """The messages of ``parts`` in order (parts over distinct buffers are copied into one)."""
        if not parts:
            return cls.of([], [])
        if len(parts) == 1:
            return parts[0]
        buffers = list({id(p.buf): p.buf for p in parts}.values())
        offsets = dict(zip(map(id, buffers), np.cumsum([0] + [b.size for b in buffers[:-1]]).tolist(), strict=True))
        buf = buffers[0] if len(buffers) == 1 else np.concatenate(buffers)
        return cls(
            np.concatenate([p.recv_ns for p in parts]),
            buf,
            np.concatenate([p.start + offsets[id(p.buf)] for p in parts]),
            np.concatenate([p.size for p in parts]),
        )

    def take(self, order: np.ndarray) -> RawMessages:
        """The messages at ``order``."""
        return RawMessages(self.recv_ns[order], self.buf, self.start[order], self.size[order])

    def in_log_order(self) -> RawMessages:
        """These messages sorted by log time (stable: equal times keep their order)."""
        if np.all(self.recv_ns[1:] >= self.recv_ns[:-1]):
            return self
        return self.take(np.argsort(self.recv_ns, kind="stable"))


class Storage(Protocol):
    """One opened storage file (or a bag rosbags reads as a whole)."""

    label: str
    channels: dict[int, ChannelInfo]
    message_count: int

    def time_range_ns(self) -> tuple[int, int] | None:
        """(first, last) log time, or None without messages."""

    def read(self, wanted: Mapping[int, str], start_ns: int | None, stop_ns: int | None
             ) -> dict[str, list[RawMessages]]:
        """The raw messages of the ``wanted`` channels (id -> logical topic) logged in
        [start_ns, stop_ns), per logical topic, not necessarily in log-time order."""

    def close(self) -> None:
        """Release the file."""

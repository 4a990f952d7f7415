"""Per-stream liveness for /diagnostics: OK, WARN, ERROR or STALE from receive times."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

OK, WARN, ERROR, STALE = 0, 1, 2, 3
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR", STALE: "STALE"}


@dataclass
class StreamStatus:
    """Liveness and input problems of one subscribed stream.

    The expected period is learned from receive intervals (a running median-free
    estimate: the smallest recent interval that is not a burst), so no rate has to be
    configured; a stream is STALE once nothing arrived for ``stale_periods`` of it.

    Attributes:
        topic: resolved topic name.
        stale_periods: silence, in expected periods, after which the stream is STALE.
        warn_window_ns: how long a refused message keeps the stream at WARN.
        outage_ns: silence of every input after which a stream is STALE anyway.
    """

    topic: str
    stale_periods: float = 3.0
    warn_window_ns: int = 2_000_000_000
    outage_ns: int = 1_000_000_000
    count: int = 0
    refused: Counter = field(default_factory=Counter)
    flagged: Counter = field(default_factory=Counter)
    last_recv_ns: int | None = None
    last_problem_ns: int | None = None
    period_ns: float | None = None
    stale_episodes: int = 0
    last_stamp_ns: int | None = None
    _was_stale: bool = False

    def on_message(self, recv_ns: int) -> None:
        """A message arrived (accepted or not)."""
        if self.last_recv_ns is not None:
            interval = recv_ns - self.last_recv_ns
            if interval > 0:
                if self.period_ns is None:
                    self.period_ns = float(interval)
                elif interval < 4 * self.period_ns:
                    # Slow exponential average of normal intervals; gaps do not inflate it.
                    self.period_ns += 0.02 * (interval - self.period_ns)
        self.last_recv_ns = recv_ns
        self.count += 1
        self._was_stale = False

    def stamp_went_backwards(self, stamp_ns: int) -> bool:
        """Note the stamp of a message taken in; True when it is older than the previous one.

        Compared with the previous stamp, not the newest, so a clock reset is flagged
        once rather than until the stamps catch up again.
        """
        backwards = self.last_stamp_ns is not None and stamp_ns < self.last_stamp_ns
        self.last_stamp_ns = stamp_ns
        return backwards

    def on_problem(self, reason: str, recv_ns: int, refused: bool, count: int = 1) -> None:
        """``count`` messages were refused (``refused``) or flagged for the given reason."""
        (self.refused if refused else self.flagged)[reason] += count
        self.last_problem_ns = recv_ns

    def is_stale(self, now_ns: int, latest_input_ns: int | None = None) -> bool:
        """True when this stream fell silent.

        Silent means: other input kept arriving for ``stale_periods`` expected periods
        after this stream's last message (``latest_input_ns`` is the newest receive time
        over every stream), or nothing at all arrived for ``outage_ns`` (then a monitor
        that was merely starved of CPU for a few periods does not call every stream stale).
        """
        if self.last_recv_ns is None or self.period_ns is None:
            return self.last_recv_ns is None
        limit_ns = self.stale_periods * self.period_ns
        if latest_input_ns is not None and latest_input_ns - self.last_recv_ns > limit_ns:
            return True
        return now_ns - self.last_recv_ns > max(limit_ns, self.outage_ns)

    def level(self, now_ns: int, latest_input_ns: int | None = None) -> tuple[int, str]:
        """(level, message) at ``now_ns``; counts a new stale episode once."""
        if self.last_recv_ns is None:
            return STALE, "no message received yet"
        if self.is_stale(now_ns, latest_input_ns):
            if not self._was_stale:
                self._was_stale = True
                self.stale_episodes += 1
            silence_s = (now_ns - self.last_recv_ns) * 1e-9
            return STALE, f"no message for {silence_s:.2f} s"
        if self.last_problem_ns is not None and now_ns - self.last_problem_ns < self.warn_window_ns:
            reasons = ", ".join(sorted(set(self.refused) | set(self.flagged)))
            return WARN, f"bad input: {reasons}"
        return OK, f"{1e9 / self.period_ns:.0f} Hz" if self.period_ns else "receiving"

    def values(self) -> dict[str, object]:
        """Key-values for the diagnostic status."""
        out: dict[str, object] = {
            "messages": self.count,
            "rate_hz": 1e9 / self.period_ns if self.period_ns else 0.0,
            "refused": sum(self.refused.values()),
            "flagged": sum(self.flagged.values()),
            "stale_episodes": self.stale_episodes,
        }
        out.update({f"refused.{k}": v for k, v in sorted(self.refused.items())})
        out.update({f"flagged.{k}": v for k, v in sorted(self.flagged.items())})
        return out

"""Debounced gap events: one open event per category, opened and closed with hysteresis."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from sim_real_bridge.errors import ConfigError

ACTION_OPEN = "open"
ACTION_UPDATE = "update"
ACTION_CLOSE = "close"

class Handover(NamedTuple):
    """An event of ``source`` that an opening event of ``target``/``kind`` takes over (see
    ``EventTracker.carry_over``): what the target's cause was read as at first."""

    source: str
    target: str
    kind: str
    out_of_contact: bool  # only where the sim's tool touches nothing
    capped: bool  # only a source event of at most unauthored_handover_max_s
    evidence_key: str


#: A changed contact ends when the tool leaves it: a residual that goes on out of contact
#: as a load on the arm (a weight, a hand) was the load's. (An actuation change shows in
#: contact as the joints' own residual, which the contact rule gives to dynamics already.)
#: An obstacle met with a link loads the arm like a hand until it has carried the tool off
#: its path; a stalling joint follows less of its command (a lower gain) until it stops.
HANDOVERS: tuple[Handover, ...] = (
    Handover("contact", "dynamics", "payload", True, False, "went_on_out_of_contact_as"),
    Handover("contact", "human", "push", True, False, "went_on_out_of_contact_as"),
    Handover("contact", "human", "hold", True, False, "went_on_out_of_contact_as"),
    Handover("human", "unauthored", "obstacle", False, True, "went_on_as"),
    Handover("dynamics", "unauthored", "joint_stall", False, True, "went_on_as"),
)

@dataclass
class EventConfig:
    """Debouncing of events.

    Attributes:
        min_duration_s: a category must stay active this long before its event opens;
            the event's start is then back-dated to when the activity began.
        heal_s: an open event closes once its category has been inactive this long; its
            end is the last active time.
        gap_tolerance_s: while an event is pending (not yet open), inactivity shorter than
            this does not restart the min_duration clock.
        update_period_s: minimum spacing of "update" records of one open event.
        min_duration_by_category: per-category overrides of min_duration_s (a human
            load needs a little longer: an obstacle first touching a link looks the same;
            a contact residual too: a slick object pushed by the tool shows brief ones).
        handover_s: an event handed over (see ``EventTracker.hand_over``) last was active
            within this long of the event that takes it over beginning.
        handover_goes_on_s: ... and that event was still active this long after (a
            blip as a contact ends takes nothing over).
        unauthored_handover_max_s: a human (dynamics) event at most this long goes to an
            obstacle (a stall) whose event begins as it stops (see
            ``HANDOVERS``).
    """

    min_duration_s: float = 0.2
    heal_s: float = 1.0
    gap_tolerance_s: float = 0.1
    update_period_s: float = 1.0
    min_duration_by_category: dict[str, float] = field(default_factory=lambda: {"human": 0.3, "contact": 0.3})
    handover_s: float = 0.2
    handover_goes_on_s: float = 0.5
    unauthored_handover_max_s: float = 1.5

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        for name in ("min_duration_s", "heal_s", "gap_tolerance_s", "update_period_s", "handover_s",
                     "handover_goes_on_s", "unauthored_handover_max_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"EventConfig.{name} must be >= 0, got {getattr(self, name)}")
        for category, value in self.min_duration_by_category.items():
            if not value >= 0:
                raise ConfigError(f"EventConfig.min_duration_by_category[{category!r}] must be >= 0, got {value}")


@dataclass
class EventRecord:
    """An event as it opens, updates or closes (times on the monitor time base, ns)."""

    id: str
    category: str
    kind: str
    severity: float
    start_ns: int
    end_ns: int
    open: bool
    action: str
    evidence: dict[str, str] = field(default_factory=dict)
    handed_over_from: str = ""


@dataclass
class _Handover:
    target: str
    event_id: str
    evidence: dict[str, str]


@dataclass
class _CategoryState:
    pending_since_ns: int | None = None
    pending_last_ns: int | None = None
    event_id: str | None = None
    start_ns: int = 0
    last_active_ns: int = 0
    severity: float = 0.0
    kinds: Counter = field(default_factory=Counter)
    evidence: dict[str, str] = field(default_factory=dict)
    last_update_ns: int = 0
    handover: _Handover | None = None


class EventTracker:
    """Turns per-tick category activity into open/update/close event records.

    Args:
        config: debouncing parameters.
        id_prefix: prefix of event ids (ids are ``{prefix}{n:04d}-{category}``).
    """

    def __init__(self, config: EventConfig | None = None, id_prefix: str = "ev") -> None:
        self.config = config or EventConfig()
        self.config.validate()
        self.id_prefix = id_prefix
        self._states: dict[str, _CategoryState] = {}
        self._seq = 0
        self.closed: list[EventRecord] = []
        self.opened_count: Counter = Counter()
        self._last_t_ns: int | None = None

    def _state(self, category: str) -> _CategoryState:
        st = self._states.get(category)
        if st is None:
            st = self._states[category] = _CategoryState()
        return st

    @staticmethod
    def _kind(st: _CategoryState) -> str:
        return st.kinds.most_common(1)[0][0] if st.kinds else ""

    def _record(self, category: str, st: _CategoryState, action: str, end_ns: int) -> EventRecord:
        kind = self._kind(st)
        return EventRecord(
            id=st.event_id or "", category=category, kind=kind, severity=round(st.severity, 6),
            start_ns=st.start_ns, end_ns=end_ns, open=action != ACTION_CLOSE, action=action,
            evidence=dict(st.evidence),
        )

    def update(
        self,
        t_ns: int,
        active: dict[str, tuple[float, str, dict[str, str]]],
    ) -> list[EventRecord]:
        """Advance to time t_ns.

        Args:
            t_ns: analysis time (non-decreasing across calls).
            active: categories active at t: {category: (severity 0..1, kind, evidence)}.

        Returns:
            Records emitted at this time (open, update, close), in category order.

        Raises:
            ConfigError: t_ns went backwards or a severity is outside 0..1.
        """
        if self._last_t_ns is not None and t_ns < self._last_t_ns:
            raise ConfigError(f"EventTracker time went backwards: {t_ns} < {self._last_t_ns}")
        self._last_t_ns = t_ns
        cfg = self.config
        out: list[EventRecord] = []
        # A category neither active, pending nor open has nothing to do (most, most ticks).
        busy = [c for c, st in self._states.items() if st.event_id is not None or st.pending_since_ns is not None]
        for category in sorted(active.keys() | busy if active else busy):
            st = self._state(category)
            if category in active:
                severity, kind, evidence = active[category]
                if not 0.0 <= severity <= 1.0:
                    raise ConfigError(f"severity of {category} must be in 0..1, got {severity}")
                if st.event_id is None:
                    if st.pending_since_ns is None or t_ns - (st.pending_last_ns or t_ns) > cfg.gap_tolerance_s * 1e9:
                        st.pending_since_ns = t_ns
                        st.kinds = Counter()
                        st.severity = 0.0
                    st.pending_last_ns = t_ns
                    st.kinds[kind] += 1
                    if severity >= st.severity:
                        st.evidence = dict(evidence)
                    st.severity = max(st.severity, severity)
                    min_s = cfg.min_duration_by_category.get(category, cfg.min_duration_s)
                    if t_ns - st.pending_since_ns >= min_s * 1e9:
                        self._seq += 1
                        st.event_id = f"{self.id_prefix}{self._seq:04d}-{category}"
                        st.start_ns = st.pending_since_ns
                        st.last_active_ns = t_ns
                        st.last_update_ns = t_ns
                        self.opened_count[category] += 1
                        out.append(self._record(category, st, ACTION_OPEN, t_ns))
                else:
                    st.last_active_ns = t_ns
                    st.handover = None  # (its own residual again)
                    st.kinds[kind] += 1
                    if severity >= st.severity:
                        st.evidence = dict(evidence)
                    st.severity = max(st.severity, severity)
                    if t_ns - st.last_update_ns >= cfg.update_period_s * 1e9:
                        st.last_update_ns = t_ns
                        out.append(self._record(category, st, ACTION_UPDATE, t_ns))
            else:
                if st.event_id is None:
                    if st.pending_since_ns is not None and t_ns - (st.pending_last_ns or t_ns) > cfg.gap_tolerance_s * 1e9:
                        st.pending_since_ns = None
                        st.pending_last_ns = None
                elif t_ns - st.last_active_ns >= cfg.heal_s * 1e9:
                    out.append(self._close(category, st))
        return out

    def _close(self, category: str, st: _CategoryState) -> EventRecord:
        rec = self._record(category, st, ACTION_CLOSE, st.last_active_ns)
        target = self._states.get(st.handover.target) if st.handover else None
        if (st.handover and target and target.event_id == st.handover.event_id
                and target.last_active_ns - st.last_active_ns >= self.config.handover_goes_on_s * 1e9):
            # the residual went on under the target's cause while this event healed
            rec.category, rec.handed_over_from = st.handover.target, category
            rec.kind = self._kind(target)
            rec.evidence.update(st.handover.evidence)
            self.opened_count[category] -= 1
            self.opened_count[st.handover.target] += 1
        self.closed.append(rec)
        self._states[category] = _CategoryState()
        return rec

    def hand_over(self, source: str, target: str, evidence: dict[str, str], max_s: float = float("inf")) -> bool:
        """Propose that ``source``'s open event closes as ``target``'s: its residual goes
        on under the cause of ``target``'s open event, which began within ``handover_s`` of
        the source's last activity (the source is inactive now). It does, keeping its id
        and start and taking the target's category and kind (``evidence`` added), if, when
        the source heals, the target's event is still open and was active at least
        ``handover_goes_on_s`` after the source's last activity, and the source was not
        active again.
        A source event longer than ``max_s`` is not handed over.

        Returns:
            Whether it was proposed.
        """
        src, dst = self._states.get(source), self._states.get(target)
        if src is None or dst is None or src.event_id is None or dst.event_id is None:
            return False
        if src.last_active_ns >= (self._last_t_ns or 0):
            return False  # (active now: both causes at once, each its own event)
        if abs(dst.start_ns - src.last_active_ns) > self.config.handover_s * 1e9:
            return False
        if src.last_active_ns - src.start_ns > max_s * 1e9:
            return False  # (longer than the target's cause could pass for the source's)
        src.handover = _Handover(target, dst.event_id, dict(evidence))
        return True

    def carry_over(self, records: list[EventRecord], out_of_contact: bool) -> None:
        """Propose the ``HANDOVERS`` that the events opening in ``records`` (one row's)
        take over; ``out_of_contact``: the sim's tool touches nothing at the row."""
        for record in records:
            if record.action != ACTION_OPEN:
                continue
            for rule in HANDOVERS:
                if ((rule.target, rule.kind) == (record.category, record.kind)
                        and (out_of_contact or not rule.out_of_contact)):
                    max_s = self.config.unauthored_handover_max_s if rule.capped else float("inf")
                    self.hand_over(rule.source, rule.target, {rule.evidence_key: record.id}, max_s)

    def finish(self) -> list[EventRecord]:
        """Close every open event (end of run); returns the close records."""
        out = []
        for category in sorted(self._states):
            st = self._states[category]
            if st.event_id is not None:
                out.append(self._close(category, st))
        return out

    def open_events(self) -> list[EventRecord]:
        """Snapshots of the currently open events (action "update")."""
        return [
            self._record(c, st, ACTION_UPDATE, st.last_active_ns)
            for c, st in sorted(self._states.items()) if st.event_id is not None
        ]

    def open_categories(self) -> list[str]:
        """Categories that have an open event."""
        return [c for c, st in sorted(self._states.items()) if st.event_id is not None]

    @property
    def event_count(self) -> int:
        """Events opened so far."""
        return self._seq

"""Synthetic RunReportData for the report tests and the README screenshot."""

from __future__ import annotations

import numpy as np

from sim_real_bridge.offline.report_data import (
    CalibrationRow,
    ContactSeries,
    JointSeries,
    PoseSeries,
    RunReportData,
    TimingSeries,
)

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3"]


def synthetic_run(
    name: str = "wipe_friction_2026-12-02",
    duration_s: float = 30.0,
    rate_hz: float = 200.0,
    seed: int = 3,
    joint_names: list[str] | None = None,
) -> RunReportData:
    """Return a plausible run: a contact phase with extra residual, a push, a dropout."""
    rng = np.random.default_rng(seed)
    names = list(joint_names or JOINTS)
    n = int(duration_s * rate_hz)
    j = len(names)
    t = np.arange(n) / rate_hz
    in_contact = (t > 0.3 * duration_s) & (t < 0.7 * duration_s)
    push = (t > 0.8 * duration_s) & (t < 0.8 * duration_s + 1.0)
    phase_w = np.linspace(0.2, 1.5, j)
    pos = 0.004 * np.sin(np.outer(t, phase_w)) + 0.0008 * rng.standard_normal((n, j))
    pos[in_contact] += 0.01 * rng.standard_normal((int(in_contact.sum()), j))
    pos[push, 1] += 0.05
    vel = np.gradient(pos, t, axis=0) if n > 1 else np.zeros_like(pos)
    eff = 0.2 * rng.standard_normal((n, j))
    eff[push] += 3.0
    force = np.abs(0.5 * rng.standard_normal(n))
    force[in_contact] += 4.0 + 1.5 * rng.standard_normal(int(in_contact.sum()))
    force[push] += 15.0
    torque = 0.1 * force + 0.05 * np.abs(rng.standard_normal(n))
    dropout = (t > 0.55 * duration_s) & (t < 0.55 * duration_s + 0.5)
    force[dropout] = np.nan
    sim_phase = np.where(in_contact, "contact", "free")
    real_phase = np.where(in_contact | push, "contact", "free")
    t_timing = t[:: max(1, int(rate_hz))]
    latency = 0.012 + 0.001 * np.sin(t_timing / 5.0)
    offset = 0.003 + 1e-4 * t_timing
    ev = [
        {"category": "contact", "kind": "friction", "start_s": 0.31 * duration_s, "end_s": 0.69 * duration_s,
         "severity": 0.8, "snapshot": "snapshots/contact_0001.mcap", "evidence": {"force_rms_n": 4.1}},
        {"category": "sensor", "kind": "dropout", "start_s": 0.55 * duration_s, "end_s": 0.55 * duration_s + 0.6,
         "severity": 0.5, "snapshot": None, "evidence": {"gap_s": 0.5}},
        {"category": "human", "kind": "push", "start_s": 0.8 * duration_s + 0.1, "end_s": 0.8 * duration_s + 1.2,
         "severity": 0.9, "snapshot": "snapshots/human_0002.mcap", "evidence": {"ext_force_n": 15.0}},
        {"category": "dynamics", "kind": "latency", "start_s": 0.05 * duration_s, "end_s": 0.25 * duration_s,
         "severity": 0.3, "snapshot": None, "evidence": {}},
    ]
    truth = [
        {"category": "contact", "kind": "friction", "start_s": 0.3 * duration_s, "end_s": 0.7 * duration_s},
        {"category": "human", "kind": "push", "start_s": 0.8 * duration_s, "end_s": 0.8 * duration_s + 1.0},
        {"category": "unauthored", "kind": "object_slip", "start_s": 0.9 * duration_s,
         "end_s": 0.9 * duration_s + 1.0},
    ]
    calibration = [
        CalibrationRow(name=nm, delay_s=0.01 + 0.002 * k, gain=1.0 - 0.01 * k, offset_rad=0.001 * k,
                       rms_before_rad=0.006 + 0.001 * k, rms_after_rad=0.003 + 0.0005 * k)
        for k, nm in enumerate(names)
    ]
    return RunReportData(
        name=name,
        scenario="wipe_friction",
        duration_s=duration_s,
        joint_names=names,
        joints=JointSeries(t_s=t, position_rad=pos, velocity_rad_s=vel, effort_nm=eff),
        contact=ContactSeries(t_s=t, force_residual_n=force, torque_residual_nm=torque,
                              sim_phase=sim_phase, real_phase=real_phase),
        pose=PoseSeries(t_s=t, position_error_m=np.abs(pos[:, :3]).sum(axis=1) * 0.3,
                        orientation_error_rad=np.abs(pos[:, 3:]).sum(axis=1) if j > 3 else None),
        timing=TimingSeries(t_s=t_timing, clock_offset_s=offset, latency_s=latency,
                            clock_offset_std_s=np.full(t_timing.size, 4e-4),
                            latency_std_s=np.full(t_timing.size, 8e-4)),
        events=ev,
        truth=truth,
        ledger={"contact": 0.45, "human": 0.2, "dynamics": 0.15, "sensor": 0.05, "unexplained": 0.15},
        calibration=calibration,
        scores={"per_category": {
            "contact": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "median_delay_s": 0.3, "n_events": 1,
                        "n_truth": 1},
            "human": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "median_delay_s": 0.1, "n_events": 1,
                      "n_truth": 1},
            "unauthored": {"precision": 1.0, "recall": 0.0, "f1": 0.0, "median_delay_s": None, "n_events": 0,
                           "n_truth": 1},
        }, "overall": {"macro_f1": 0.667}},
        snapshots=["snapshots/contact_0001.mcap", "snapshots/human_0002.mcap"],
        warnings=["topic /real/imu missing: IMU residuals skipped"],
        realtime_factor=42.0,
    )

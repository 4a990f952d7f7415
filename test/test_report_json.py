"""Figure JSON with the typed arrays' data spliced in: the very text of the plain encoding.

:func:`plot_spec.to_json` leaves each array's base64 data out of the JSON encoder and the
<script> escaping (a stand-in marks its place) and splices it in afterwards; the text
must be the one json.dumps writes of the whole figure, escaped or not, also when a
figure's own text is the stand-in.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from sim_real_bridge.offline import plot_spec as ps

HOSTILE = '<img src=x onerror=alert(1)>"</script>&amp;\u00e9\u2603'


def _plain_json(fig: ps.Figure, script_safe: bool) -> str:
    text = json.dumps(ps._plain(fig.to_dict()), separators=(",", ":"), allow_nan=False)
    if script_safe:
        text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return text


def _figure(label: Any) -> ps.Figure:
    rng = np.random.default_rng(0)
    fig = ps.subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=[HOSTILE, "b"])
    t = np.linspace(0.0, 1.0, 500)
    fig.add_trace(ps.scatter(x=t.astype(np.float32), y=np.where(t > 0.5, np.nan, t), name=label,
                             hovertemplate="%{x}<extra></extra>"), row=1, col=1)
    fig.add_trace(ps.bar(x=[label, "b"], y=np.array([1, 2], dtype=np.int16), text=[np.float64(np.inf), 2.5],
                         marker_color=["#fff", "#000"]), row=2, col=1)
    fig.add_trace(ps.box(x=[label], q1=[np.float32(0.5)], median=[1.0], q3=[2.0], lowerfence=[0.0],
                         upperfence=[3.0], mean=[np.nan], extra=rng.normal(size=(2, 3)),
                         counts=np.arange(4, dtype=np.int64), none=np.zeros(0)), row=2, col=1)
    fig.update_layout(title=HOSTILE, meta={"t": (1, 2.0, True, None)})
    return fig


@pytest.mark.parametrize("label", ["plain", HOSTILE, ps._PAYLOAD, f"x{ps._PAYLOAD_JSON}"])
@pytest.mark.parametrize("script_safe", [False, True])
def test_spliced_json_is_the_plain_encoding(label: str, script_safe: bool) -> None:
    fig = _figure(label)
    text = ps.to_json(fig, script_safe=script_safe)
    assert text == _plain_json(fig, script_safe)
    assert json.loads(text)["data"][0]["y"]["dtype"] == "f8"
    if script_safe:
        assert not set("<>&") & set(text)


def test_values_keep_their_json_types() -> None:
    assert ps._plain([np.float32(1.5), np.int64(3), np.bool_(True), float("nan"), np.float64("-inf"), (1, "a")]) == [
        1.5, 3, True, None, None, [1, "a"]]
    assert ps._plain({"a": {"b": np.array([1.0, 2.0])}})["a"]["b"]["dtype"] == "f8"

"""When a shuffled collection's next window is due to close (`ldpstream.shuffler.service.next_due`): what the shuffler
publishes so that the API shows a stopped or stuck shuffler as overdue (`ldp_shuffle_window_overdue_seconds`)."""

from __future__ import annotations

from ldpstream.contract.spec import Shuffle, load_spec
from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.shuffler.service import Collection, next_due
from ldpstream.shuffler.state import Pending, ShufflerState


def test_the_next_due_close_is_the_window_after_the_last_closed_plus_grace_and_margin() -> None:
    spec = load_spec(PROJECT_ROOT / "examples" / "shuffled.yaml").replace(
        windows=["10s"], shuffle=Shuffle(delta=1e-6, min_batch=100, grace_s=20))
    newer = spec.replace(version=2, windows=["1m"])
    c = Collection(spec.name, {1: spec, 2: newer}, {1: (None, None), 2: (None, None)}, 8, Pending())
    assert next_due(c, 5.0) is None  # nothing closed yet: nothing overdue
    c.state = ShufflerState(closed={1: 100_000})
    # window 100 s closed: 110 s is the next, it ends at 120 s, then 20 s of grace and 5 s of margin
    assert next_due(c, 5.0) == 145_000
    c.state = ShufflerState(closed={1: 100_000, 2: 60_000})  # version 2: 120 s + 60 s + 20 s + 5 s, later
    assert next_due(c, 5.0) == 145_000
    c.state = ShufflerState(closed={1: 200_000, 2: 60_000})
    assert next_due(c, 0.5) == 200_500

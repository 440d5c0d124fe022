"""Chunked parsing: whole-line chunks split anywhere give identical results."""

from __future__ import annotations

import itertools

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from trainee.metrics import Extractor, MetricPoint, RoundMetrics

from .helpers import extractor, spec

SPECS = [
    spec("val_acc", "stdout_regex", r"val_acc=(?P<value>\S+)", goal="max", required=True),
    spec("tokens_per_s", "stdout_regex", r"(\d+(?:\.\d+)?) tok/s"),
]

POOL = [
    "Epoch 3: 100%|██████████| 10/10 [00:01<00:00,  9.87it/s, loss=0.123, v_num=1]",
    "{'loss': 0.41, 'grad_norm': 1.2345, 'learning_rate': 5e-05, 'epoch': 1.0}",
    "{'eval_loss': 0.39, 'epoch': 1.0}",
    "step 500: train loss 2.1234, val loss 2.2345",
    "iter 10: loss 4.2000, time 35.12ms, mfu 12.34%",
    "step=20 total_loss=3.5e-01 val_acc=0.875",
    "epoch 2 val_acc=nan",
    "val_acc=high",
    "loss=inf",
    "Epoch 1: 10%|█| loss=0.9\rEpoch 1: 20%|██| loss=0.8",
    "throughput 1234.5 tok/s",
    "",
    "nothing to see here",
]


def feed(
    lines: list[str], cuts: list[int], trailing_newline: bool
) -> tuple[Extractor, list[MetricPoint]]:
    """Feed ``lines`` in chunks cut before the given line indexes."""
    ex = extractor(SPECS, max_points=16)
    returned: list[MetricPoint] = []
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(lines)}), len(lines)]
    for a, b in itertools.pairwise(bounds):
        text = "\n".join(lines[a:b]) + ("\n" if trailing_newline else "")
        returned.extend(ex.feed_output(text))
    return ex, returned


def canonical(result: RoundMetrics) -> bytes:
    return msgspec.json.encode(result)


def by_metric(points: list[MetricPoint]) -> dict[str, list[MetricPoint]]:
    out: dict[str, list[MetricPoint]] = {}
    for p in points:
        out.setdefault(p.name, []).append(p)
    return out


def test_last_line_of_a_chunk_without_newline_is_not_lost() -> None:
    ex = extractor()
    assert [p.value for p in ex.feed_output("loss=1\nloss=2")] == [1.0, 2.0]
    assert [p.value for p in ex.feed_output("loss=3")] == [3.0]
    assert ex.result().finals == {"loss": 3.0}


def test_every_split_between_lines_gives_the_same_result() -> None:
    lines = POOL * 3
    whole, _ = feed(lines, [], trailing_newline=False)
    expected = canonical(whole.result())
    for cut in range(len(lines) + 1):
        for trailing in (False, True):
            ex, _ = feed(lines, [cut], trailing)
            assert canonical(ex.result()) == expected, (cut, trailing)
    one_by_one, _ = feed(lines, list(range(len(lines))), trailing_newline=True)
    assert canonical(one_by_one.result()) == expected


@settings(max_examples=150, deadline=None, database=None)
@given(
    lines=st.lists(st.sampled_from(POOL), max_size=80),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=20),
    trailing=st.booleans(),
)
def test_property_line_aligned_chunking_never_changes_the_result(
    lines: list[str], cuts: list[int], trailing: bool
) -> None:
    whole, whole_new = feed(lines, [], trailing_newline=False)
    chunked, chunked_new = feed(lines, cuts, trailing)
    assert canonical(chunked.result()) == canonical(whole.result())
    # the points handed out live are the same too, metric by metric
    assert by_metric(chunked_new) == by_metric(whole_new)


def test_two_hundred_thousand_lines_parse() -> None:
    lines = []
    for i in range(200_000):
        if i % 4 == 0:
            lines.append(f"step {i}: train loss {1 + i * 1e-6:.6f}, val loss 2.2345")
        elif i % 4 == 1:
            lines.append(f"Epoch {i // 1000}: 50%|█████     | 5/10 [00:00<00:00, loss=0.5]")
        elif i % 4 == 2:
            lines.append(f"{{'loss': 0.41, 'learning_rate': 5e-05, 'epoch': {i / 1000}}}")
        else:
            lines.append("INFO nothing to parse on this line, just words and 12 numbers")
    ex = Extractor([], placeholders={}, project_root="/nonexistent", max_points=1000)
    returned = 0
    for start in range(0, len(lines), 8192):
        returned += len(ex.feed_output("\n".join(lines[start : start + 8192])))
    r = ex.result()
    last = r.points[-1]
    assert (last.seq, last.step, last.value) == (149_999, None, 0.41)
    assert r.finals == {"loss": 0.41}
    assert sum(p.step == 199_996 for p in r.points) <= 1
    assert len(r.points) <= 1001
    assert 1000 <= returned < 150_000

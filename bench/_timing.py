"""Side-by-side timing: frameworks interleaved in rounds, median per iteration.

Like ``timeit``: each step is warmed up, then an iteration count is chosen so
one sample lasts at least ``min_time`` seconds, and the garbage collector is
off while a sample runs. Unlike ``timeit``, the frameworks take turns: every
round times one sample of each framework, starting with a different one each
round, so slow drift of the machine (frequency, other load) hits all of them
alike. The reported time is the median over rounds of the per-iteration time.
"""

import gc
import statistics
import time
from dataclasses import dataclass, field

_perf_counter = time.perf_counter


def _sample(step, number):
    """Seconds that ``number`` calls of ``step`` take, with the GC off."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = _perf_counter()
        for _ in range(number):
            step()
        return _perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()


def autorange(step, min_time):
    """The smallest iteration count (1, 2, 5, 10, 20, 50, ...) whose sample lasts min_time."""
    number = 1
    while True:
        for multiple in (1, 2, 5):
            n = number * multiple
            if _sample(step, n) >= min_time:
                return n
        number *= 10


@dataclass
class Timing:
    """Per-iteration times of one framework in one benchmark, in seconds."""

    number: int  # iterations per sample
    samples: list = field(default_factory=list)
    counts: list = field(default_factory=list)  # measure's ``count`` deltas, summed

    def counts_per_iteration(self):
        """The summed ``count`` deltas over the iterations timed."""
        done = self.number * len(self.samples)
        return tuple(c / done for c in self.counts)

    @property
    def median(self):
        return statistics.median(self.samples)

    def summary_us(self):
        """Median, min and quartiles in microseconds (JSON-ready)."""
        ordered = sorted(self.samples)
        if len(ordered) >= 4:
            q1, _, q3 = statistics.quantiles(ordered, n=4)
        else:
            q1, q3 = ordered[0], ordered[-1]
        return {
            'median': self.median * 1e6,
            'min': ordered[0] * 1e6,
            'p25': q1 * 1e6,
            'p75': q3 * 1e6,
            'max': ordered[-1] * 1e6,
            'rounds': len(ordered),
            'iterations_per_sample': self.number,
        }


def warm_up(step, calls, seconds):
    """Call ``step`` at least ``calls`` times and for at least ``seconds``."""
    deadline = _perf_counter() + seconds
    done = 0
    while done < calls or _perf_counter() < deadline:
        step()
        done += 1


def measure(steps, rounds, min_time, warmup, warmup_time=0.0, pause=0.0, count=None):
    """Time the zero-argument callables in ``steps`` ({name: step}) side by side.

    Each step is warmed up (``warmup`` calls and ``warmup_time`` seconds at
    least), then calibrated with autorange; then ``rounds`` rounds each time
    one sample of every step, the starting step rotating. ``pause`` seconds
    of sleep before each sample let other frameworks' spinning worker threads
    (OpenMP, OpenBLAS) go idle. ``count``: a function returning a tuple of
    counters (page faults, say), read around each sample; their deltas are
    summed in each Timing's ``counts``. Returns {name: Timing}.
    """
    names = list(steps)
    timings = {}
    for name in names:
        warm_up(steps[name], warmup, warmup_time)
        timings[name] = Timing(number=autorange(steps[name], min_time))
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            gc.collect()
            if pause:
                time.sleep(pause)
            timing = timings[name]
            before = count() if count else ()
            timing.samples.append(_sample(steps[name], timing.number) / timing.number)
            if count:
                deltas = [b - a for a, b in zip(before, count())]
                timing.counts = [c + d for c, d in zip(timing.counts or [0] * len(deltas),
                                                        deltas)]
    return timings


def versus(timings, ours='xgrad', theirs='torch'):
    """The side-by-side summary of ``measure``'s result for two steps: each
    median and spread in microseconds, the ratio of medians and the median
    of the per-round ratios (the pairs share each round's machine load)."""
    paired = [a / b for a, b in zip(timings[ours].samples, timings[theirs].samples)]
    return {
        'time_us': {n: t.median * 1e6 for n, t in timings.items()},
        'spread_us': {n: t.summary_us() for n, t in timings.items()},
        'ratio': timings[ours].median / timings[theirs].median,
        'paired_ratio': statistics.median(paired),
    }

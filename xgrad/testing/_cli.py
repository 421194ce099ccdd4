"""``python -m xgrad check``: the gradient checks of every registered op, for
CI. Runs the cases of ``_driver`` with a progress bar, prints a summary
table of the failures (worst error per op), writes JSON and JUnit XML
reports, and exits 1 when a gradient is wrong (2 on bad arguments)."""

import argparse
import collections
import datetime
import json
import os
import platform
import sys
import time
import xml.etree.ElementTree as ET

import numpy
import tqdm

import xgrad
from xgrad.testing import _driver

FLOAT_DTYPES = ('float16', 'float32', 'float64')


def _csv(text):
    return [t.strip() for t in text.split(',') if t.strip()]


def build_parser():
    p = argparse.ArgumentParser(
        prog='python -m xgrad check',
        description='Check the first and second derivatives of every registered op '
                    'against float64 numerical differentiation.')
    p.add_argument('--ops', type=_csv, metavar='NAME[,NAME]',
                   help='only these ops (default: every differentiable op)')
    p.add_argument('--dtype', type=_csv, default=list(FLOAT_DTYPES), metavar='DTYPES',
                   help='float dtypes, comma-separated (default: %(default)s)')
    p.add_argument('--device', type=_csv, default=['native:0'], metavar='DEVICES',
                   help='devices, comma-separated (default: native:0)')
    p.add_argument('--order', type=_csv, default=['1', '2'], metavar='ORDERS',
                   help='derivative orders, 1 and/or 2 (default: 1,2)')
    p.add_argument('--seed', type=int, default=0, help='first seed (default: 0)')
    p.add_argument('--repeat', type=int, default=1, metavar='N',
                   help='run every case with N seeds (seed, seed+1, ...) to find flaky '
                        'tolerances (default: 1)')
    p.add_argument('--snapshot', metavar='DIR',
                   help='golden gradients: record the float64 gradients that pass where '
                        'DIR has none, compare every dtype and device with them otherwise')
    p.add_argument('--update-snapshot', action='store_true',
                   help='with --snapshot: re-record the golden gradients')
    p.add_argument('--json', metavar='PATH', help='write a JSON report here')
    p.add_argument('--junit', metavar='PATH', help='write a JUnit XML report here')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    p.add_argument('--list', action='store_true', help='list the cases and exit')
    return p


def parse_args(argv):
    p = build_parser()
    args = p.parse_args(argv)
    for d in args.dtype:
        if d not in FLOAT_DTYPES:
            p.error('--dtype {!r}: choose from {}'.format(d, ', '.join(FLOAT_DTYPES)))
    try:
        args.order = sorted({int(o) for o in args.order})
    except ValueError:
        p.error('--order takes 1 and/or 2, not {}'.format(','.join(args.order)))
    if not set(args.order) <= {1, 2}:
        p.error('--order takes 1 and/or 2, not {}'.format(args.order))
    if args.repeat < 1:
        p.error('--repeat must be at least 1')
    if args.update_snapshot and not args.snapshot:
        p.error('--update-snapshot needs --snapshot DIR')
    for name in args.device:
        try:
            xgrad.get_device(name)
        except xgrad.XgradError as e:
            p.error('--device {}: {}'.format(name, e))
    try:
        args.cases = _driver.cases(args.ops, args.dtype, args.device, args.order)
    except ValueError as e:
        p.error('--ops: {}'.format(e))
    return args


# ---------------------------------------------------------------------------
# Progress

class Progress:
    """Progress of the run on ``stream`` (stderr by default).

    On a terminal: a tqdm bar (rate, time left, failures so far). Elsewhere
    (a pipe, a CI log, a file): a plain line per 10% that a reader or a grep
    can follow, with no carriage returns. With no stream at all (stderr
    closed, ``pythonw``) or ``enabled=False``: nothing."""

    def __init__(self, total, stream=None, enabled=True):
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and self.stream is not None
        self.done = self.failed = 0
        self.start = time.perf_counter()
        self.next_mark = 0.1
        self.bar = None
        if self.enabled and _is_terminal(self.stream):
            cols, rows = _terminal_size(self.stream)
            self.bar = tqdm.tqdm(total=total, file=self.stream, unit='case',
                                 ncols=cols, nrows=rows, leave=True)

    def update(self, result):
        self.done += 1
        self.failed += not result.passed
        if self.bar is not None:
            self.bar.set_postfix_str('failed {} {}'.format(self.failed, result.case.op),
                                     refresh=False)
            self.bar.update(1)
            return
        if not self.enabled:
            return
        frac = self.done / max(self.total, 1)
        if frac >= self.next_mark or self.done == self.total:
            self.stream.write('{:3.0f}% ({}/{}) failed {}, {:.0f} s\n'.format(
                100 * frac, self.done, self.total, self.failed,
                time.perf_counter() - self.start))
            self.stream.flush()
            while self.next_mark <= frac:
                self.next_mark += 0.1

    def close(self):
        if self.bar is not None:
            self.bar.set_postfix_str('failed {}'.format(self.failed))
            self.bar.close()


def _terminal_size(stream):
    """The terminal's columns and rows, 80x24 where it reports none: a fresh
    pty says 0x0, from which tqdm would draw nothing at all."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return 80, 24
    return size.columns or 80, size.lines or 24


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed file
        return False


# ---------------------------------------------------------------------------
# Reports

def summarize(results):
    """Failures grouped by (op, dtype, device, order), each with its worst
    case (largest absolute error) and how many samples/seeds failed."""
    groups = collections.OrderedDict()
    for r in results:
        if r.passed:
            continue
        c = r.case
        key = (c.op, c.dtype.name, c.device, c.order)
        worst = groups.get(key)
        if worst is None or r.worst_abs > worst[0].worst_abs:
            groups[key] = (r, (worst[1] if worst else 0) + 1)
        else:
            groups[key] = (worst[0], worst[1] + 1)
    return groups


def print_summary(results, elapsed, stream=None):
    stream = sys.stdout if stream is None else stream
    n_failed = sum(not r.passed for r in results)
    ops = {r.case.op for r in results}
    groups = summarize(results)
    if groups:
        rows = [('op', 'dtype', 'device', 'order', 'failed', 'worst abs', 'worst rel',
                 'message')]
        for (op, dtype, device, order), (r, count) in groups.items():
            first_line = (r.message.strip().splitlines() or [''])[0]
            rows.append((op, dtype, device, str(order), str(count),
                         '{:.3g}'.format(r.worst_abs), '{:.3g}'.format(r.worst_rel),
                         first_line[:100]))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            stream.write('  '.join(c.ljust(w) for c, w in zip(row, widths)) + '  '
                         + row[-1] + '\n')
        stream.write('\n')
    snap = collections.Counter(r.snapshot for r in results if r.snapshot)
    snap_text = ''.join(', {} golden {}'.format(n, s) for s, n in sorted(snap.items()))
    stream.write('{} cases of {} ops: {} passed, {} failed{} in {:.1f} s\n'.format(
        len(results), len(ops), len(results) - n_failed, n_failed, snap_text, elapsed))


def write_json(path, args, results, elapsed):
    report = {
        'tool': 'python -m xgrad check',
        'xgrad_version': xgrad.__version__,
        'numpy_version': numpy.__version__,
        'python': platform.python_version(),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(),
        'arguments': {'ops': args.ops, 'dtype': args.dtype, 'device': args.device,
                      'order': args.order, 'seed': args.seed, 'repeat': args.repeat,
                      'snapshot': args.snapshot},
        'elapsed_s': round(elapsed, 3),
        'summary': {'cases': len(results),
                    'passed': sum(r.passed for r in results),
                    'failed': sum(not r.passed for r in results)},
        'cases': [r.as_json() for r in results],
    }
    _write(path, json.dumps(report, indent=1, sort_keys=True) + '\n')


def write_junit(path, results, elapsed):
    """One JUnit test case per op, dtype, device and order (its samples and
    seeds together); a failure carries the worst one's message."""
    groups = collections.OrderedDict()
    for r in results:
        c = r.case
        groups.setdefault((c.op, c.dtype.name, c.device, c.order), []).append(r)
    failures = sum(any(not r.passed for r in rs) for rs in groups.values())
    errors = 0
    suite = ET.Element('testsuite', name='xgrad.check', tests=str(len(groups)),
                       failures=str(failures), errors=str(errors), skipped='0',
                       time='{:.3f}'.format(elapsed))
    for (op, dtype, device, order), rs in groups.items():
        tc = ET.SubElement(suite, 'testcase', classname='xgrad.check.{}'.format(op),
                           name='{}[{},{},order{}]'.format(op, dtype, device, order),
                           time='{:.3f}'.format(sum(r.seconds for r in rs)))
        bad = [r for r in rs if not r.passed]
        if bad:
            worst = max(bad, key=lambda r: r.worst_abs)
            f = ET.SubElement(tc, 'failure', type=worst.status, message=(
                '{} of {} samples/seeds failed; worst: sample {} seed {}: abs {:.3g} '
                'rel {:.3g}'.format(len(bad), len(rs), worst.case.sample.name, worst.seed,
                                    worst.worst_abs, worst.worst_rel)))
            f.text = '\n\n'.join('sample {} seed {}:\n{}'.format(
                r.case.sample.name, r.seed, r.message) for r in bad)
    tree = ET.ElementTree(ET.Element('testsuites'))
    tree.getroot().append(suite)
    ET.indent(tree)
    _write(path, ET.tostring(tree.getroot(), encoding='unicode', xml_declaration=True)
           + '\n')


def _write(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for case in args.cases:
            print(case.name)
        return 0
    snapshot = None
    if args.snapshot:
        from xgrad.testing._snapshot import GradSnapshot
        snapshot = GradSnapshot(args.snapshot)
    seeds = range(args.seed, args.seed + args.repeat)
    # With snapshots, float64 cases go first: they record what the others compare with.
    order = sorted(args.cases, key=lambda c: c.dtype.name != 'float64') if snapshot else \
        args.cases
    progress = Progress(len(order) * len(seeds), enabled=not args.no_progress)
    start = time.perf_counter()
    results = []
    for seed in seeds:
        for case in order:
            r = _driver.run_case(case, seed, snapshot, args.update_snapshot and seed == args.seed)
            results.append(r)
            progress.update(r)
    progress.close()
    elapsed = time.perf_counter() - start
    print_summary(results, elapsed)
    if args.json:
        write_json(args.json, args, results, elapsed)
    if args.junit:
        write_junit(args.junit, results, elapsed)
    return 0 if all(r.passed for r in results) else 1

"""``python -m xgrad check``: the gradient checks of every registered op, for
CI. Runs the cases of ``_driver`` with a progress bar, prints a summary
table of the failures (worst error per op), writes JSON and JUnit XML
reports, and exits 1 when a gradient is wrong (2 on bad arguments).

``--shard K/N`` runs the K-th of N parts of the cases (balanced by the
measured cost of each case, see ``_driver.shard``), ``--jobs J`` runs them
in J local processes, and ``--merge A.json B.json ...`` combines the JSON
reports of the N shards into the report one unsharded run would have
written. ``--html`` writes one self-contained page of it (``_html``).

Ops of other packages (``_user_ops``): ``--import MODULE`` imports a
module that registers them, ``--ops`` names them (``mypkg``,
``mypkg::name``, patterns), loading the package's ``xgrad.ops`` entry point
where needed; ``--jobs`` workers load the same modules. ``--layouts``
runs every case again with its inputs in other memory layouts."""

import argparse
import collections
import concurrent.futures
import datetime
import json
import multiprocessing
import os
import platform
import re
import sys
import time
import xml.etree.ElementTree as ET

import numpy

import xgrad
from xgrad._ops.registry import OpDeclarationError
from xgrad.testing import _driver, _layouts, _user_ops

FLOAT_DTYPES = ('float16', 'float32', 'float64')


def _csv(text):
    return [t.strip() for t in text.split(',') if t.strip()]


def build_parser():
    p = argparse.ArgumentParser(
        prog='python -m xgrad check',
        description='Check the first and second derivatives of every registered op '
                    'against float64 numerical differentiation.')
    p.add_argument('--ops', type=_csv, metavar='NAME[,NAME]',
                   help="only these ops: xgrad's op names, packages (mypkg: its ops, "
                        "found through its xgrad.ops entry point; xgrad: xgrad's), "
                        "package::name, or patterns of them (linalg.*, mypkg::rms*) "
                        "(default: the ops of the --import modules, else every "
                        "differentiable op of xgrad)")
    p.add_argument('--import', dest='imports', type=_csv, action='extend',
                   metavar='MODULE[,MODULE]',
                   help='import these modules first; they register their ops with '
                        'xgrad.testing.register (--jobs workers import them too)')
    p.add_argument('--layouts', nargs='?', type=_csv, const=list(_layouts.LAYOUTS),
                   metavar='LAYOUTS',
                   help='also run every case with the inputs in these memory layouts, on '
                        'native devices ({}; default: all of them)'.format(
                            ', '.join(_layouts.LAYOUTS)))
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
    p.add_argument('--html', metavar='PATH',
                   help='write an HTML report here: one self-contained file with the '
                        'summary, the failing cases, their error against the step, and '
                        'the worst error of every op, dtype and order')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    p.add_argument('--list', action='store_true', help='list the cases and exit')
    p.add_argument('--shard', metavar='K/N',
                   help='run only the K-th of N parts of the cases (1 <= K <= N), '
                        'balanced by the measured cost of each case; the N parts are '
                        'disjoint and together make the whole run')
    p.add_argument('--jobs', type=int, default=1, metavar='J',
                   help='run the cases in J processes (0: one per CPU; default: 1)')
    p.add_argument('--merge', nargs='+', metavar='REPORT',
                   help="combine the --json reports of a run's shards into one report "
                        '(with --json and/or --junit); exits 1 if a merged case failed')
    return p


# Options that choose or run cases: meaningless with --merge (the reports say
# what ran).
_RUN_OPTIONS = ('--ops', '--dtype', '--device', '--order', '--seed', '--repeat',
                '--snapshot', '--update-snapshot', '--list', '--shard', '--jobs',
                '--import', '--layouts')


def _parse_shard(p, text):
    m = re.fullmatch(r'\s*(\d+)\s*/\s*(\d+)\s*', text or '')
    k, n = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    if m is None or n < 1 or not 1 <= k <= n:
        p.error('--shard takes K/N with 1 <= K <= N (e.g. --shard 2/4 for the second of '
                'four parts), not {!r}'.format(text))
    return k, n


def parse_args(argv):
    p = build_parser()
    args = p.parse_args(argv)
    if args.merge:
        given = sorted({a.split('=')[0] for a in argv if a.split('=')[0] in _RUN_OPTIONS})
        if given:
            p.error('--merge takes only --json, --junit, --html and --no-progress besides '
                    'the reports (the reports say what ran), not {}'.format(', '.join(given)))
        return args
    args.shard = _parse_shard(p, args.shard) if args.shard is not None else None
    if args.jobs < 0:
        p.error('--jobs must be at least 1 (or 0: one per CPU), not {}'.format(args.jobs))
    if args.jobs == 0:
        args.jobs = os.cpu_count() or 1
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
    args.layouts = list(args.layouts or ())
    for layout in args.layouts:
        if layout not in _layouts.LAYOUTS:
            p.error('--layouts {!r}: choose from {}'.format(layout,
                                                            ', '.join(_layouts.LAYOUTS)))
    args.imports = list(args.imports or ())
    try:
        packages = sorted({p for m in args.imports for p in _user_ops.import_module(m)})
    except OpDeclarationError as e:
        p.error('--import: {}'.format(e))
    try:
        args.infos = _user_ops.select(args.ops, packages)
    except OpDeclarationError as e:
        p.error('--ops: {}'.format(e))
    except ValueError as e:
        p.error('--ops: {}'.format(e))
    try:
        # A user op's declaration is tried on its samples before any case runs.
        _user_ops.check_calls(args.infos)
    except OpDeclarationError as e:
        p.error('bad op declaration: {}'.format(e))
    args.packages = packages
    args.cases = _driver.cases(dtypes=args.dtype, devices=args.device, orders=args.order,
                               layouts=tuple(args.layouts), infos=args.infos)
    return args


# ---------------------------------------------------------------------------
# Progress

class Progress:
    """Progress of the run on ``stream`` (stderr by default).

    On a terminal: a tqdm bar (rate, time left, failures so far). Elsewhere
    (a pipe, a CI log, a file), or where tqdm is not installed (xgrad run
    from a source tree without its dependencies): a plain line per 10% that
    a reader or a grep can follow, with no carriage returns. With no stream
    at all (stderr closed, ``pythonw``) or ``enabled=False``: nothing."""

    def __init__(self, total, stream=None, enabled=True):
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and self.stream is not None
        self.done = self.failed = 0
        self.start = time.perf_counter()
        self.next_mark = 0.1
        self.bar = None
        if self.enabled and _is_terminal(self.stream):
            self.bar = _progress_bar(total, self.stream)

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


def _progress_bar(total, stream):
    """A tqdm bar of ``total`` cases on the terminal ``stream``, or None
    where tqdm cannot be imported. Imported here, not with the module: only
    a terminal needs it, and the check itself must run without it."""
    try:
        import tqdm
    except ImportError:
        return None
    cols, rows = _terminal_size(stream)
    return tqdm.tqdm(total=total, file=stream, unit='case', ncols=cols, nrows=rows,
                     leave=True)


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
# Reports. They work on the cases' JSON records (``CaseResult.as_json()``),
# which is also what ``--merge`` reads back from the shards' reports.

def _record(r):
    return r if isinstance(r, dict) else r.as_json()


def summarize(results):
    """Failures grouped by (op, dtype, device, order), each with its worst
    case (largest absolute error) and how many samples/seeds failed."""
    groups = collections.OrderedDict()
    for r in map(_record, results):
        if r['status'] == 'passed':
            continue
        key = (r['op'], r['dtype'], r['device'], r['order'])
        worst = groups.get(key)
        if worst is None or r['worst_abs'] > worst[0]['worst_abs']:
            groups[key] = (r, (worst[1] if worst else 0) + 1)
        else:
            groups[key] = (worst[0], worst[1] + 1)
    return groups


def print_summary(results, elapsed, stream=None):
    stream = sys.stdout if stream is None else stream
    records = [_record(r) for r in results]
    n_failed = sum(r['status'] != 'passed' for r in records)
    ops = {r['op'] for r in records}
    groups = summarize(records)
    if groups:
        rows = [('op', 'dtype', 'device', 'order', 'failed', 'worst abs', 'worst rel',
                 'message')]
        for (op, dtype, device, order), (r, count) in groups.items():
            first_line = (r['message'].strip().splitlines() or [''])[0]
            rows.append((op, dtype, device, str(order), str(count),
                         '{:.3g}'.format(r['worst_abs']), '{:.3g}'.format(r['worst_rel']),
                         first_line[:100]))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            stream.write('  '.join(c.ljust(w) for c, w in zip(row, widths)) + '  '
                         + row[-1] + '\n')
        stream.write('\n')
    snap = collections.Counter(r['snapshot'] for r in records if r['snapshot'])
    snap_text = ''.join(', {} golden {}'.format(n, s) for s, n in sorted(snap.items()))
    stream.write('{} cases of {} ops: {} passed, {} failed{} in {:.1f} s\n'.format(
        len(records), len(ops), len(records) - n_failed, n_failed, snap_text, elapsed))


def _arguments(args):
    out = {'ops': args.ops, 'dtype': args.dtype, 'device': args.device,
           'order': args.order, 'seed': args.seed, 'repeat': args.repeat,
           'snapshot': args.snapshot}
    # Only where given: a run of xgrad's own ops writes what it always wrote.
    if args.imports:
        out['import'] = args.imports
    if args.layouts:
        out['layouts'] = args.layouts
    return out


def _packages(args):
    """{package: version} of the user packages whose ops ran, or None."""
    found = _user_ops.versions(args.infos)
    return found or None


def _report(records, arguments, elapsed, shard=None, selection=None, **extra):
    report = {
        'tool': 'python -m xgrad check',
        'xgrad_version': xgrad.__version__,
        'numpy_version': numpy.__version__,
        'python': platform.python_version(),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(),
        'arguments': arguments,
        # {'index': K, 'count': N} for --shard K/N, else None.
        'shard': shard,
        # The whole run's cases (all shards): their number and a hash of their names.
        'selection': selection,
        'elapsed_s': round(elapsed, 3),
        'summary': {'cases': len(records),
                    'passed': sum(r['status'] == 'passed' for r in records),
                    'failed': sum(r['status'] != 'passed' for r in records)},
        'cases': records,
    }
    report.update(extra)
    return report


def write_json(path, args, results, elapsed, shard=None, selection=None):
    _write_report(path, _report([_record(r) for r in results], _arguments(args), elapsed,
                                shard, selection))


def _write_html(path, report):
    from xgrad.testing import _html
    _write(path, _html.render(report, summarize(report['cases'])))


def _write_report(path, report):
    _write(path, json.dumps(report, indent=1, sort_keys=True) + '\n')


def write_junit(path, results, elapsed):
    """One JUnit test case per op, dtype, device and order (its samples and
    seeds together); a failure carries the worst one's message."""
    groups = collections.OrderedDict()
    for r in map(_record, results):
        groups.setdefault((r['op'], r['dtype'], r['device'], r['order']), []).append(r)
    failures = sum(any(r['status'] != 'passed' for r in rs) for rs in groups.values())
    errors = 0
    suite = ET.Element('testsuite', name='xgrad.check', tests=str(len(groups)),
                       failures=str(failures), errors=str(errors), skipped='0',
                       time='{:.3f}'.format(elapsed))
    for (op, dtype, device, order), rs in groups.items():
        tc = ET.SubElement(suite, 'testcase', classname='xgrad.check.{}'.format(op),
                           name='{}[{},{},order{}]'.format(op, dtype, device, order),
                           time='{:.3f}'.format(sum(r['seconds'] for r in rs)))
        bad = [r for r in rs if r['status'] != 'passed']
        if bad:
            worst = max(bad, key=lambda r: r['worst_abs'])
            f = ET.SubElement(tc, 'failure', type=worst['status'], message=(
                '{} of {} samples/seeds failed; worst: sample {} seed {}: abs {:.3g} '
                'rel {:.3g}'.format(len(bad), len(rs), worst['sample'], worst['seed'],
                                    worst['worst_abs'], worst['worst_rel'])))
            f.text = '\n\n'.join('sample {} seed {}:\n{}'.format(
                r['sample'], r['seed'], r['message']) for r in bad)
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
# Running: in this process, or in --jobs worker processes

def _run_serial(cases, todo, seeds, snapshot, update_seed, progress, curves=False):
    out = {}
    for seed in seeds:
        for i in todo:
            r = _driver.run_case(cases[i], seed, snapshot, seed == update_seed, curves)
            out[seed, i] = r
            progress.update(r)
    return out


_WORKER = {}


def _worker_init(selection, digest, snapshot_dir, sources=()):
    """In a --jobs worker: the same case list as the parent's, from the
    same modules and entry points (``sources``), checked by its digest: an
    op registered at run time in the parent by other means, as the tests
    do, is not in a fresh process's registry."""
    try:
        _user_ops.load_sources(sources)
        ops, dtypes, devices, orders, layouts, packages = selection
        cases = _driver.cases(dtypes=dtypes, devices=devices, orders=orders,
                              layouts=tuple(layouts),
                              infos=_user_ops.select(ops, packages))
        found = '{} cases'.format(len(cases))
    except (ValueError, OpDeclarationError) as e:
        cases, found = [], str(e)
    if _driver.selection_digest(cases) != digest:
        # Raised by each task (an initializer's exception would only break the pool).
        _WORKER['error'] = JobsError(
            'a --jobs worker process finds other cases than the main process ({}; ops '
            'registered at run time are not seen by worker processes: register them in '
            'a module given to --import or named by an xgrad.ops entry point, or run '
            'without --jobs)'.format(found))
    _WORKER['cases'] = cases
    if snapshot_dir:
        from xgrad.testing._snapshot import GradSnapshot
        _WORKER['snapshot'] = GradSnapshot(snapshot_dir)


class JobsError(RuntimeError):
    pass


def _worker_run(unit, seeds, update_seed, curves=False):
    if 'error' in _WORKER:
        raise _WORKER['error']
    cases, snapshot = _WORKER['cases'], _WORKER.get('snapshot')
    return [(seed, i, _driver.run_case(cases[i], seed, snapshot, seed == update_seed,
                                       curves).as_json())
            for seed in seeds for i in unit]


def _from_json(case, d):
    return _driver.CaseResult(case, d['seed'], d['status'], d['worst_abs'], d['worst_rel'],
                              d['message'], d['seconds'], d['draws'], d['snapshot'],
                              d.get('step_curve'))


def _run_jobs(args, todo, seeds, update_seed, progress, jobs, curves=False):
    """The cases in ``todo`` in ``jobs`` processes (spawned: xgrad's worker
    threads and BLAS's are not forked). Work units (see
    ``_driver.work_units``) are handed out the most expensive first."""
    cases = args.cases
    units = _driver.work_units(cases, todo, keep_snapshot_groups=bool(args.snapshot))
    costs = _driver.estimate_costs(cases)
    units.sort(key=lambda u: -sum(costs[i] for i in u))
    selection = (args.ops, args.dtype, args.device, args.order, args.layouts,
                 args.packages)
    out = {}
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=min(jobs, max(len(units), 1)),
            mp_context=multiprocessing.get_context('spawn'),
            initializer=_worker_init,
            initargs=(selection, _driver.selection_digest(cases), args.snapshot,
                      _user_ops.sources())) as pool:
        futures = [pool.submit(_worker_run, u, list(seeds), update_seed, curves)
                   for u in units]
        try:
            for f in concurrent.futures.as_completed(futures):
                for seed, i, d in f.result():
                    r = out[seed, i] = _from_json(cases[i], d)
                    progress.update(r)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return out


# ---------------------------------------------------------------------------
# Merging shard reports

class MergeError(Exception):
    pass


def _load_report(path):
    try:
        with open(path, encoding='utf-8') as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise MergeError('cannot read {}: {}'.format(path, e))
    if not isinstance(report, dict) or report.get('tool') != 'python -m xgrad check' \
            or not isinstance(report.get('cases'), list):
        raise MergeError('{} is not a JSON report of python -m xgrad check'.format(path))
    if 'selection' not in report or any('index' not in c for c in report['cases']):
        raise MergeError('{} was written by an xgrad without --shard/--merge (no case '
                         'indices); rerun it with this version'.format(path))
    return report


def merge_reports(paths):
    """The report of the whole run from the JSON reports of its shards.
    Raises ``MergeError`` for reports of different versions or options,
    shards given twice or missing, or cases that overlap."""
    reports = [_load_report(p) for p in paths]
    first, first_path = reports[0], paths[0]
    for field in ('xgrad_version', 'numpy_version', 'python', 'arguments', 'selection',
                  'packages'):
        for path, rep in zip(paths[1:], reports[1:]):
            if rep.get(field) != first.get(field):
                what = {'arguments': 'options', 'selection': 'cases (registered ops)',
                        'packages': 'op packages (versions)'}.get(
                    field, field.replace('_', ' '))
                raise MergeError('{} and {} come from different runs: their {} differ '
                                 '({}: {}; {}: {})'.format(
                                     first_path, path, what, first_path,
                                     json.dumps(first.get(field), sort_keys=True), path,
                                     json.dumps(rep.get(field), sort_keys=True)))
    shards = [r.get('shard') or {'index': 1, 'count': 1} for r in reports]
    n = shards[0]['count']
    by_index = {}
    for path, s in zip(paths, shards):
        if s['count'] != n:
            raise MergeError('{} is shard {}/{} but {} is shard {}/{}: all reports must '
                             'be shards of one split'.format(path, s['index'], s['count'],
                                                             first_path, shards[0]['index'],
                                                             n))
        if s['index'] in by_index:
            raise MergeError('shard {}/{} is given twice: {} and {}'.format(
                s['index'], n, by_index[s['index']], path))
        by_index[s['index']] = path
    missing = [k for k in range(1, n + 1) if k not in by_index]
    if missing:
        raise MergeError('{} {} missing (given: {})'.format(
            ', '.join('shard {}/{}'.format(k, n) for k in missing),
            'is' if len(missing) == 1 else 'are',
            ', '.join('{}/{} in {}'.format(k, n, by_index[k]) for k in sorted(by_index))))
    seen = {}
    for path, rep in zip(paths, reports):
        for c in rep['cases']:
            key = (c['seed'], c['index'])
            if key in seen:
                raise MergeError('case {}[{}]-{}-{}-order{} seed {} is in both {} and {} '
                                 '(shards of different splits or cost tables?)'.format(
                                     c['op'], c['sample'], c['dtype'], c['device'],
                                     c['order'], c['seed'], seen[key], path))
            seen[key] = path
    arguments = first['arguments']
    total = first['selection']['cases'] * arguments['repeat']
    if len(seen) != total:
        raise MergeError('the reports hold {} cases, the run has {}: some cases ran in no '
                         'shard (shards of different splits or cost tables?)'.format(
                             len(seen), total))
    records = sorted((c for rep in reports for c in rep['cases']),
                     key=lambda c: (c['seed'], c['index']))
    merged_from = [{'path': p, 'shard': r.get('shard'), 'date': r.get('date'),
                    'elapsed_s': r.get('elapsed_s'), 'summary': r.get('summary')}
                   for p, r in sorted(zip(paths, reports),
                                      key=lambda pr: (pr[1].get('shard') or {}).get('index', 1))]
    elapsed = sum(r.get('elapsed_s') or 0.0 for r in reports)
    extra = {'packages': first['packages']} if first.get('packages') else {}
    return _report(records, arguments, elapsed, None, first['selection'],
                   merged_from=merged_from,
                   longest_shard_s=max(r.get('elapsed_s') or 0.0 for r in reports), **extra)


def _merge_main(args):
    try:
        report = merge_reports(args.merge)
    except MergeError as e:
        build_parser().error('--merge: {}'.format(e))
    records = report['cases']
    print_summary(records, report['elapsed_s'])
    print('merged {} report{} (time summed over them; the longest took {:.1f} s)'.format(
        len(args.merge), 's' if len(args.merge) > 1 else '', report['longest_shard_s']))
    if args.json:
        _write_report(args.json, report)
    if args.junit:
        write_junit(args.junit, records, report['elapsed_s'])
    if args.html:
        _write_html(args.html, report)
    return 0 if report['summary']['failed'] == 0 else 1


# ---------------------------------------------------------------------------

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.merge:
        return _merge_main(args)
    cases = args.cases
    # With snapshots, float64 cases go first: they record what the others compare with.
    order = sorted(range(len(cases)), key=lambda i: cases[i].dtype.name != 'float64') \
        if args.snapshot else list(range(len(cases)))
    if args.shard is not None:
        mine = set(_driver.shard(cases, *args.shard, keep_snapshot_groups=bool(args.snapshot)))
        todo = [i for i in order if i in mine]
    else:
        todo = order
    if args.list:
        for i in todo:
            print(cases[i].name)
        return 0
    snapshot = None
    if args.snapshot:
        from xgrad.testing._snapshot import GradSnapshot
        snapshot = GradSnapshot(args.snapshot)
    seeds = range(args.seed, args.seed + args.repeat)
    update_seed = args.seed if args.update_snapshot else None
    progress = Progress(len(todo) * len(seeds), enabled=not args.no_progress)
    # A failed comparison's error against the step, for the reports that show it.
    curves = bool(args.json or args.html)
    start = time.perf_counter()
    try:
        if args.jobs > 1 and len(todo) > 1:
            try:
                done = _run_jobs(args, todo, seeds, update_seed, progress, args.jobs,
                                 curves)
            except JobsError as e:
                progress.close()
                build_parser().error('--jobs: {}'.format(e))
        else:
            done = _run_serial(cases, todo, seeds, snapshot, update_seed, progress, curves)
    finally:
        progress.close()
    elapsed = time.perf_counter() - start
    # In the order of one unsharded run in one process; 'index' is the case's
    # position in it, which --merge sorts the shards' cases by.
    position = {i: p for p, i in enumerate(order)}
    records = []
    for seed in seeds:
        for i in todo:
            d = done[seed, i].as_json()
            d['index'] = position[i]
            records.append(d)
    print_summary(records, elapsed)
    shard = {'index': args.shard[0], 'count': args.shard[1]} if args.shard else None
    selection = {'cases': len(cases), 'digest': _driver.selection_digest(cases)}
    packages = _packages(args)
    extra = {'packages': packages} if packages else {}
    if args.json or args.html:
        report = _report(records, _arguments(args), elapsed, shard, selection, **extra)
    if args.json:
        _write_report(args.json, report)
    if args.junit:
        write_junit(args.junit, records, elapsed)
    if args.html:
        _write_html(args.html, report)
    return 0 if all(r['status'] == 'passed' for r in records) else 1

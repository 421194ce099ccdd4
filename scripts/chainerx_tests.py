#!/usr/bin/env python
"""Run ChainerX's own routine tests against xgrad and count the results.

    python scripts/chainerx_tests.py /path/to/chainer [--files test_binary.py ...]
        [--json results.json] [--markdown docs/chainerx_results.md] [-- pytest args]

``/path/to/chainer`` is a chainer/chainer source tree (v7.8.1: its
tests/chainerx_tests with ChainerX's conftest and op_utils, array_utils,
dtype_utils, math_utils). The job runs
tests/chainerx_tests/unit_tests/routines_tests/*.py and
unit_tests/test_*.py (arrays, backward, backprop modes, contexts, devices,
dtypes, constants) with xgrad serving as ``chainerx`` (see
scripts/chainerx_tests_plugin.py), on native devices, cuda cases skipped
without a GPU. The tests need Chainer itself importable (``pip install
chainer==7.8.1``: its pure-Python wheel), pytest, and, as ChainerX's CI,
NumPy 1.x (1.23.5).

It prints the per-file counts, writes them as JSON (``--json``) and as a
Markdown table (``--markdown``), and lists the most frequent first lines of
the failures, the starting point for explaining them. Exit status: pytest's.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
UNIT_TESTS = 'tests/chainerx_tests/unit_tests'
ROUTINES = UNIT_TESTS + '/routines_tests'


def test_files(chainer, names):
    routines = os.path.join(chainer, ROUTINES)
    if names:
        units = os.path.join(chainer, UNIT_TESTS)
        paths = [n if os.path.isabs(n) else
                 os.path.join(units, n) if os.path.isfile(os.path.join(units, n)) else
                 os.path.join(routines, n) for n in names]
    else:
        paths = []
        for directory in (routines, os.path.join(chainer, UNIT_TESTS)):
            paths += sorted(os.path.join(directory, n) for n in os.listdir(directory)
                            if n.startswith('test_') and n.endswith('.py'))
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        sys.exit('not found: {}'.format(', '.join(missing)))
    return paths


def run(chainer, paths, json_path, extra):
    tests_dir = os.path.join(chainer, 'tests')
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [REPO, HERE] + [p for p in [env.get('PYTHONPATH')] if p])
    env['XGRAD_CHAINERX_REPORT'] = json_path
    env['PYTHONDONTWRITEBYTECODE'] = '1'  # the source tree may be read-only
    with tempfile.TemporaryDirectory() as tmp:
        # An empty ini of our own: the chainer tree's setup.cfg would make every
        # warning an error, and its rootdir is read-only.
        ini = os.path.join(tmp, 'pytest.ini')
        with open(ini, 'w') as f:
            f.write('[pytest]\nmarkers =\n    cuda\n    parametrize_device\n'
                    '    parametrize_device_name\n')
        command = [sys.executable, '-m', 'pytest', '-p', 'chainerx_tests_plugin',
                   '-p', 'no:cacheprovider', '-c', ini, '--rootdir', tests_dir,
                   '--confcutdir', tests_dir, '--continue-on-collection-errors', '-q', '--no-header', '-rN',
                   '--tb=no'] + extra + paths
        return subprocess.call(command, env=env, cwd=tests_dir)


def summarize(results):
    rows = []
    totals = collections.Counter()
    for name, c in sorted(results['files'].items()):
        rows.append((os.path.basename(name), c['passed'], c['failed'] + c['error'],
                     c['skipped']))
        totals.update(passed=c['passed'], failed=c['failed'] + c['error'],
                      skipped=c['skipped'])
    return rows, totals


def markdown(rows, totals):
    lines = ['| file | pass | fail | skip | pass % |', '|---|---:|---:|---:|---:|']

    def pct(p, f):
        return '{:.1f}'.format(100.0 * p / (p + f)) if p + f else '-'
    for name, p, f, s in rows:
        lines.append('| {} | {} | {} | {} | {} |'.format(name, p, f, s, pct(p, f)))
    lines.append('| **total** | {passed} | {failed} | {skipped} | {0} |'.format(
        pct(totals['passed'], totals['failed']), **totals))
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('chainer', help='a chainer/chainer source tree')
    parser.add_argument('--files', nargs='*', help='test files (default: all routines '
                        'tests and the unit_tests/test_*.py files)')
    parser.add_argument('--json', help='write the counts and failure lines here')
    parser.add_argument('--markdown', help='write the per-file table here')
    parser.add_argument('--top', type=int, default=40,
                        help='how many of the most frequent failure lines to print')
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != '--']
    paths = test_files(os.path.abspath(args.chainer), args.files)
    with tempfile.TemporaryDirectory() as tmp:
        json_path = args.json or os.path.join(tmp, 'results.json')
        status = run(os.path.abspath(args.chainer), paths, os.path.abspath(json_path), extra)
        with open(json_path) as f:
            results = json.load(f)
    rows, totals = summarize(results)
    table = markdown(rows, totals)
    print(table)
    if args.markdown:
        with open(args.markdown, 'w') as f:
            f.write(table + '\n')
    causes = collections.Counter(results['failures'].values())
    print('\nMost frequent failure lines:')
    for line, n in causes.most_common(args.top):
        print('{:7d}  {}'.format(n, line))
    return status


if __name__ == '__main__':
    sys.exit(main())

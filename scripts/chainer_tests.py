#!/usr/bin/env python
"""Run Chainer 7.8.1's own tests against xgrad (as its ``chainerx``).

    python scripts/chainer_tests.py /path/to/chainer-source [--venv DIR]
        [--record docs/chainer_results.md] [pytest paths or -k ... after --]

Chainer's tests are not in its sdist: the source tree is a checkout of
chainer/chainer at v7.8.1 (see its DEVELOPERS.md). The script makes (or
reuses) a venv with chainer==7.8.1, numpy==1.23.5, pytest and mock, runs
the ChainerX cases (``-m "chainerx and not gpu"``) of the test files that
have them (CORE_FILES and MORE_FILES) with Chainer's setup.cfg pytest
settings, less ``--doctest-modules`` and ``filterwarnings = error``, through ``python -m xgrad.chainerx_compat``, and
writes per-file passed/failed counts. xgrad comes from this checkout (built
in place: ``python setup.py build_ext --inplace``) on PYTHONPATH.
"""

import argparse
import collections
import configparser
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CORE_FILES = [
    'tests/chainer_tests/test_variable.py',
    'tests/chainer_tests/test_function_node.py',
    'tests/chainer_tests/test_backprop.py',
    'tests/chainer_tests/test_link.py',
    'tests/chainer_tests/test_backend.py',
    'tests/chainer_tests/test_gradient_check.py',
    'tests/chainer_tests/test_optimizer.py',
] + ['tests/chainer_tests/functions_tests/{}_tests'.format(family) for family in (
    'activation', 'array', 'math', 'connection', 'normalization', 'loss', 'pooling')]

# The other files with ChainerX cases (they mention ``chainerx`` or
# ``inject_backend_tests``); a directory runs only its ChainerX cases.
MORE_FILES = ['tests/chainer_tests/' + path for path in (
    # functions: the families outside CORE_FILES
    'functions_tests/evaluation_tests',
    'functions_tests/noise_tests',
    'functions_tests/rnn_tests',
    # links: the families with ChainerX cases (activation, model, rnn and
    # theano have none; caffe's generated caffe_pb2 needs protobuf <= 3.20)
    'links_tests/connection_tests',
    'links_tests/loss_tests',
    'links_tests/normalization_tests',
    'link_hooks_tests',
    # optimizers and initializers
    'optimizers_tests',
    'optimizer_hooks_tests',
    'initializer_tests',
    # the rest of Chainer
    'backends_tests',
    'dataset_tests',
    'serializers_tests',
    'testing_tests',
    'training_tests',
    'utils_tests',
    'test_function_and_function_node.py',
    'test_reporter.py',
)]

REQUIREMENTS = ['numpy==1.23.5', 'pytest', 'mock']


def make_venv(venv):
    """A venv with Chainer 7.8.1 on NumPy 1.23.5 (kept when it exists)."""
    python = os.path.join(venv, 'bin', 'python')
    if not os.path.exists(python):
        subprocess.check_call([sys.executable, '-m', 'venv', venv])
    check = subprocess.run([python, '-c', 'import chainer, numpy, pytest, mock; '
                            'assert chainer.__version__ == "7.8.1"'], capture_output=True)
    if check.returncode != 0:
        pip = [python, '-m', 'pip', 'install', '--quiet']
        # Chainer's setup.py imports pkg_resources: build it with an old setuptools.
        subprocess.check_call(pip + ['setuptools<80', 'wheel'] + REQUIREMENTS)
        subprocess.check_call(pip + ['--no-build-isolation', 'chainer==7.8.1'])
    return python


def pytest_ini(chainer_tree, directory):
    """Chainer's [tool:pytest] settings as a pytest.ini, without doctests and
    without turning warnings into errors."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(os.path.join(chainer_tree, 'setup.cfg'))
    section = dict(config['tool:pytest'])
    section['filterwarnings'] = '\n'.join(
        line for line in section['filterwarnings'].splitlines() if line.strip() != 'error')
    section['addopts'] = ' '.join(
        opt for opt in section.get('addopts', '').split()
        if not opt.startswith('--doctest'))
    section.pop('testpaths', None)
    out = configparser.ConfigParser(interpolation=None)
    out['pytest'] = section
    path = os.path.join(directory, 'pytest.ini')
    with open(path, 'w') as f:
        out.write(f)
    return path


def count_by_file(junit_xml, chainer_tree):
    """{test file: Counter(passed=, failed=, error=, skipped=)} from a JUnit report."""
    counts = collections.defaultdict(collections.Counter)
    for case in ET.parse(junit_xml).getroot().iter('testcase'):
        path = case.get('file') or case.get('classname', '').replace('.', '/') + '.py'
        classname = case.get('classname', '')
        # classname is the module path plus the test class: find the .py file.
        parts = classname.split('.')
        for n in range(len(parts), 0, -1):
            candidate = os.path.join(*parts[:n]) + '.py'
            if os.path.exists(os.path.join(chainer_tree, 'tests', candidate)):
                path = os.path.join('tests', candidate)
                break
            if os.path.exists(os.path.join(chainer_tree, candidate)):
                path = candidate
                break
        outcome = 'passed'
        for child in case:
            if child.tag in ('failure', 'error'):
                outcome = 'failed'
            elif child.tag == 'skipped':
                outcome = 'skipped'
        counts[path][outcome] += 1
    return counts


def write_record(counts, record, command):
    total = collections.Counter()
    lines = ['| file | passed | failed | skipped |', '|---|---:|---:|---:|']
    for path in sorted(counts):
        c = counts[path]
        total.update(c)
        lines.append('| {} | {} | {} | {} |'.format(path, c['passed'], c['failed'], c['skipped']))
    run = total['passed'] + total['failed']
    rate = 100.0 * total['passed'] / run if run else 0.0
    lines.append('| **total** | **{}** | **{}** | {} |'.format(
        total['passed'], total['failed'], total['skipped']))
    table = '\n'.join(lines)
    summary = '{} of {} run cases pass ({:.1f}%).'.format(total['passed'], run, rate)
    print(table)
    print(summary)
    if record:
        with open(record, 'w') as f:
            f.write('<!-- written by scripts/chainer_tests.py; command: {} -->\n\n'.format(command))
            f.write(table + '\n\n' + summary + '\n')
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('chainer_tree', help='a Chainer 7.8.1 source tree (with tests/)')
    parser.add_argument('--venv', default=os.path.join(ROOT, '.venv-chainer'),
                        help='venv to make or reuse (default: .venv-chainer in this checkout)')
    parser.add_argument('--record', help='write per-file counts (Markdown) here')
    parser.add_argument('--junit', help='keep the JUnit XML report here')
    argv = sys.argv[1:]
    extra = argv[argv.index('--') + 1:] if '--' in argv else []
    args = parser.parse_args(argv[:argv.index('--')] if '--' in argv else argv)
    args.pytest_args = extra  # test paths (relative to the tree) and pytest options
    tree = os.path.abspath(args.chainer_tree)
    python = make_venv(args.venv)
    paths = [a for a in args.pytest_args if not a.startswith('-')] or CORE_FILES + MORE_FILES
    options = [a for a in args.pytest_args if a.startswith('-')]
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.abspath(args.junit) if args.junit else os.path.join(tmp, 'junit.xml')
        command = [python, '-m', 'xgrad.chainerx_compat', '-m', 'pytest',
                   '-c', pytest_ini(tree, tmp), '--rootdir', tree, '-p', 'no:cacheprovider',
                   '-m', 'chainerx and not gpu', '-q', '--junitxml', junit] + options + paths
        env = dict(os.environ, PYTHONPATH=ROOT)
        subprocess.run(command, cwd=tree, env=env)
        if not os.path.exists(junit):
            sys.exit('pytest wrote no report')
        write_record(count_by_file(junit, tree), args.record,
                     'python scripts/chainer_tests.py CHAINER_TREE ' + ' '.join(args.pytest_args))


if __name__ == '__main__':
    main()

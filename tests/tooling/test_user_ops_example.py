"""The worked example of docs/user_ops.md, examples/mylayers, as a team
would use it: installed (pip, not from the source tree) into a fresh
virtual environment, its ops found through its ``xgrad.ops`` entry point,
swept by ``python -m xgrad check`` (the deliberately wrong gradient of
rms_norm caught, swish and log_cosh passing), split into shards with
``--jobs`` and merged as its CI workflow does, and its own pytest run.

The fresh venv sees the packages of the interpreter running the tests
(this checkout's built xgrad, NumPy, pytest) through a .pth file, instead
of building xgrad again (minutes of Cython); only the example is installed
into it, with pip, offline (about 10 s in all).
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import xgrad

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / 'examples' / 'mylayers'

pytestmark = pytest.mark.skipif(not EXAMPLE.exists(),
                                reason='no examples/ beside the tests (an installed xgrad)')


def _run(argv, cwd, timeout=600):
    return subprocess.run([str(a) for a in argv], cwd=str(cwd), capture_output=True,
                          text=True, timeout=timeout)


def _builds_wheels_offline():
    """Whether this environment's setuptools builds a wheel with no download:
    70.1 and later have bdist_wheel built in; before, the wheel package."""
    import importlib.util
    try:
        return (importlib.util.find_spec('setuptools.command.bdist_wheel') is not None
                or importlib.util.find_spec('wheel') is not None)
    except ImportError:  # (no setuptools at all)
        return False


@pytest.fixture(scope='module')
def venv(tmp_path_factory):
    """A fresh venv with the example installed; returns (python, workdir)."""
    if not _builds_wheels_offline():
        pytest.skip('installing the example offline needs setuptools >= 70.1 (the [test] '
                    'extra brings it) or the wheel package')
    base = tmp_path_factory.mktemp('example')
    source = base / 'mylayers'
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns(
        'build', '*.egg-info', '__pycache__'))
    env_dir = base / 'venv'
    # pip >= 22.3 here installs into the venv (--python): the venv needs no pip
    # of its own (ensurepip: seconds more).
    pip = _run([sys.executable, '-m', 'pip', '--version'], base)
    found = re.match(r'pip (\d+)\.(\d+)', pip.stdout)
    outer = found is not None and (int(found.group(1)), int(found.group(2))) >= (22, 3)
    made = _run([sys.executable, '-m', 'venv'] + (['--without-pip'] if outer else [])
                + [env_dir], base)
    assert made.returncode == 0, made.stderr
    python = env_dir / ('Scripts/python.exe' if os.name == 'nt' else 'bin/python')
    purelib = _run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                   base).stdout.strip()
    inherited = [p for p in sys.path if p and os.path.isdir(p)]
    pathlib.Path(purelib, '_inherited.pth').write_text('\n'.join(inherited) + '\n')
    pip_in = [sys.executable, '-m', 'pip', '--python', python] if outer else \
        [python, '-m', 'pip']
    installed = _run(pip_in + ['install', '--quiet', '--no-deps', '--no-build-isolation',
                               '--no-index', source], base)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = _run([python, '-c', 'import xgrad, mylayers; print(xgrad.__file__); '
                 'print(mylayers.__file__)'], base)
    xgrad_file, mylayers_file = where.stdout.split()
    assert xgrad_file == xgrad.__file__  # this checkout's xgrad
    assert mylayers_file.startswith(purelib)  # the installed copy, not the source tree
    work = base / 'work'
    work.mkdir()
    return python, work, source


def _cases(path):
    return json.loads(pathlib.Path(path).read_text())['cases']


def test_the_sweep_finds_the_wrong_gradient_and_passes_the_rest(venv):
    python, work, _ = venv
    proc = _run([python, '-m', 'xgrad', 'check', '--ops', 'mylayers', '--no-progress',
                 '--json', 'all.json', '--junit', 'all.xml', '--html', 'all.html'], work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'mylayers::rms_norm' in proc.stdout and 'swish' not in proc.stdout
    cases = _cases(work / 'all.json')
    verdicts = {}
    for c in cases:
        verdicts.setdefault((c['op'], c['order']), set()).add(c['status'])
    assert verdicts == {
        ('mylayers::swish', 1): {'passed'}, ('mylayers::swish', 2): {'passed'},
        ('mylayers::rms_norm', 1): {'failed'},
        # its (wrong) backward is differentiated consistently
        ('mylayers::rms_norm', 2): {'passed'},
        # twice_differentiable=False: no order-2 case
        ('mylayers::log_cosh', 1): {'passed'}}
    assert {c['dtype'] for c in cases} == {'float16', 'float32', 'float64'}
    failed = [c for c in cases if c['status'] != 'passed']
    assert all('input 0' in c['message'] for c in failed)  # x, not the gains
    assert all(c['step_curve']['diagnosis'].startswith('wrong gradient') for c in failed)
    assert json.loads((work / 'all.json').read_text())['packages'] == {'mylayers': '0.1.0'}
    failures = ET.parse(work / 'all.xml').getroot().findall('.//failure')
    assert len(failures) == 3  # rms_norm order 1, one per dtype
    assert (work / 'all.html').read_text().count('<svg') == len(failed)


def test_the_ci_workflow_shards_and_merges(venv):
    """As .github/workflows/gradcheck.yml runs it: shards (here two, one
    with --jobs, whose workers load the entry point too), then --merge."""
    python, work, source = venv
    workflow = (source / '.github' / 'workflows' / 'gradcheck.yml').read_text()
    assert '--shard ${{ matrix.shard }}/3' in workflow and '--merge shard-*.json' in workflow
    base = [python, '-m', 'xgrad', 'check', '--ops', 'mylayers', '--no-progress']
    first = _run(base + ['--shard', '1/2', '--jobs', '2', '--json', 'shard-1.json'], work)
    second = _run(base + ['--shard', '2/2', '--json', 'shard-2.json'], work)
    assert {first.returncode, second.returncode} <= {0, 1}, first.stderr + second.stderr
    merged = _run(base[:4] + ['--merge', 'shard-1.json', 'shard-2.json', '--json', 'm.json',
                              '--junit', 'm.xml', '--html', 'm.html'], work)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    whole = _run(base + ['--json', 'whole.json'], work)
    strip = [{k: v for k, v in c.items() if k not in ('seconds', 'step_curve')}
             for c in _cases(work / 'whole.json')]
    assert strip == [{k: v for k, v in c.items() if k not in ('seconds', 'step_curve')}
                     for c in _cases(work / 'm.json')]
    assert (work / 'm.html').exists() and (work / 'm.xml').exists()


def test_the_examples_own_pytest_passes(venv):
    """Its test suite: one test per case through xgrad.testing.gradient_cases,
    rms_norm's first-order cases a strict xfail."""
    python, work, source = venv
    proc = _run([python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-rx',
                 source / 'tests'], work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert '6 xfailed' in proc.stdout and 'rms_norm' in proc.stdout

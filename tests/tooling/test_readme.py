"""Every command and code block of README.md and docs/*.md runs here, so that a
broken example fails CI.

The rules, by the fence's language (every fence must name one):

- ``python``: executed. The blocks of one file run in order in one
  namespace, as a reader would paste them, in a temporary working directory.
  A block that uses a ``cuda:`` device runs when a GPU is there and skips
  (saying so) otherwise. A block that defines ``test_*`` functions is a
  test file for the user's own suite: it is written to a file and run by
  pytest with xgrad's plugin.
- ``sh``: one command per line (``&&`` chains are split; ``#`` starts a
  comment). Each must match a rule below, or the test fails, so a new kind
  of command cannot go untested:
  - ``python -m xgrad check ARGS`` runs with its arguments, in a temporary
    directory (reports and golden gradients land there), and must exit 0.
    Where the line picks no ops, three (``--ops tanh,sum,matmul``) are added
    to keep the whole docs run to seconds; the unrestricted command as README
    writes it runs verbatim in ``tests/testing/test_check_command.py``.
  - ``python examples/NAME.py`` runs from the repository root and must exit 0.
  - ``python -m xgrad info`` runs and must exit 0, printing its xgrad and
    devices lines (with or without a GPU).
  - ``python scripts/NAME.py ARGS`` is not run (the scripts run Chainer's
    test suites from a Chainer source tree): the script must exist, its
    ``--help`` must exit 0 and list every option the line uses before ``--``
    (what follows ``--`` goes to pytest).
  - ``python -m pytest tests ...`` is this suite: the path must exist.
  - ``pip install SPEC`` is not run (it needs the network and minutes): the
    target must be ``.`` (this directory, with pyproject.toml) and each extra
    in ``.[a,b]`` must be one pyproject.toml declares.
  - ``tar xzf xgrad-*.tar.gz && cd xgrad-*``: the sdist's layout, checked by
    ``tests/tooling/test_packaging.py``.
  - ``mpiexec ... python -m xgrad.chainerx_compat SCRIPT ...`` is not run (it
    needs MPI and Chainer): it must launch ranks through xgrad's launcher.
- ``yaml``: a CI configuration; not run. Each ``run:`` line that is a
  ``python -m xgrad check`` command must parse with the command's own
  argument parser (GitHub's ``${{ ... }}`` expressions read as 1).
- ``text``: not code (a directory layout, an output); not run.
"""

import contextlib
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / 'README.md'
DOCS = sorted((ROOT / 'docs').glob('*.md'))
FILES = [README] + DOCS
FENCE = re.compile(r'^```(\S*)\n(.*?)^```\s*$', re.S | re.M)
LANGUAGES = {'python', 'sh', 'text', 'yaml'}
SMALL_OPS = 'tanh,sum,matmul'


def blocks(path, language=None):
    found = [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]
    return [b for lang, b in found if language in (None, lang)] if language \
        else found


def _id(path):
    return str(path.relative_to(ROOT))


def _env():
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
    return env


def _have_gpu():
    import xgrad
    try:
        xgrad.get_device('cuda:0')
    except xgrad.XgradError:
        return False
    return True


@pytest.mark.parametrize('path', FILES, ids=_id)
def test_every_fence_names_its_language(path):
    for lang, _ in blocks(path):
        assert lang in LANGUAGES, '{}: a fence with language {!r}; use one of {}'.format(
            _id(path), lang, sorted(LANGUAGES))


@pytest.mark.parametrize('path', FILES, ids=_id)
def test_python_blocks_run(path, tmp_path, monkeypatch):
    code = blocks(path, 'python')
    if not code:
        pytest.skip('no python blocks')
    monkeypatch.chdir(tmp_path)
    namespace = {'__name__': '__docs__'}
    ran = 0
    for i, block in enumerate(code):
        if re.search(r'^def test_', block, re.M):
            _run_as_pytest_file(block, tmp_path / 'user_tests_{}'.format(i))
        elif 'cuda:' in block and not _have_gpu():
            continue
        elif re.search(r'^\s*(from|import) mpi4py', block, re.M):
            continue  # run under mpiexec: tests/distributed runs it so
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(block, '{} block {}'.format(_id(path), i), 'exec'), namespace)
        ran += 1
    if ran < len(code):
        pytest.skip('{} of {} blocks need a GPU or mpiexec'.format(len(code) - ran, len(code)))


def _run_as_pytest_file(block, directory):
    directory.mkdir()
    (directory / 'test_user.py').write_text(block)
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         '-p', 'xgrad.testing.pytest_plugin', str(directory)],
        cwd=directory, env=dict(_env(), PYTEST_DISABLE_PLUGIN_AUTOLOAD='1'),
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r'\b3 passed\b', proc.stdout), proc.stdout[-2000:]  # one per dtype


def _commands(path):
    for block in blocks(path, 'sh'):
        for line in block.splitlines():
            line = line.split(' #')[0].strip()
            if line.startswith('#'):
                continue
            for command in line.split('&&'):
                if command.strip():
                    yield command.strip()


COMMANDS = [(path, c) for path in FILES for c in _commands(path)]


@pytest.mark.parametrize('path, command', COMMANDS,
                         ids=['{}: {}'.format(_id(p), c) for p, c in COMMANDS])
def test_shell_commands(path, command, tmp_path):
    argv = shlex.split(command)
    if argv[:4] == ['python', '-m', 'xgrad', 'check']:
        args = argv[4:]
        if '--ops' not in args:
            args += ['--ops', SMALL_OPS]
        proc = subprocess.run([sys.executable, '-m', 'xgrad', 'check'] + args,
                              cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert re.search(r'cases of \d+ ops: \d+ passed, 0 failed', proc.stdout)
        for flag in ('--json', '--junit'):
            if flag in args:
                assert (tmp_path / args[args.index(flag) + 1]).stat().st_size > 0
    elif argv[0] == 'python' and len(argv) == 2 and argv[1].startswith('examples/'):
        proc = subprocess.run([sys.executable, argv[1]], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    elif argv == ['python', '-m', 'xgrad', 'info']:
        proc = subprocess.run([sys.executable, '-m', 'xgrad', 'info'], cwd=tmp_path,
                              env=_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert re.search(r'^xgrad: +\S', proc.stdout, re.M), proc.stdout
        assert re.search(r'^devices: +\S', proc.stdout, re.M), proc.stdout
    elif argv[0] == 'python' and len(argv) >= 2 and argv[1].startswith('scripts/'):
        _check_script(argv[1], argv[2:])
    elif argv[:3] == ['python', '-m', 'pytest']:
        assert (ROOT / argv[3]).is_dir()
    elif argv[:2] == ['pip', 'install']:
        _check_pip_install(argv[2:])
    elif argv[0] == 'mpiexec':
        i = argv.index('python')
        assert argv[i:i + 3] == ['python', '-m', 'xgrad.chainerx_compat'] and \
            len(argv) > i + 3, argv
    elif argv[:2] == ['tar', 'xzf'] or argv[0] == 'cd':
        assert re.fullmatch(r'xgrad-[\d.]+(\.tar\.gz)?', argv[-1]), argv
    else:
        pytest.fail('{}: no rule runs or checks the command {!r}; add one to '
                    'tests/tooling/test_readme.py'.format(_id(path), command))


YAML_RUNS = [(path, m.group(1).strip()) for path in FILES for b in blocks(path, 'yaml')
             for m in re.finditer(r'^\s*-?\s*run:\s*(.+)$', b, re.M)]


@pytest.mark.parametrize('path, command', [r for r in YAML_RUNS if 'xgrad check' in r[1]],
                         ids=lambda v: v if isinstance(v, str) else _id(v))
def test_ci_yaml_check_commands_parse(path, command):
    from xgrad.testing import _cli
    argv = shlex.split(re.sub(r'\$\{\{[^}]*\}\}', '1', command))
    assert argv[:4] == ['python', '-m', 'xgrad', 'check'], argv
    args = argv[4:]
    if '--merge' in args:
        # Report paths from a shell glob: the parser takes them, the files need not exist.
        args = [a.replace('*', '1') for a in args]
    parsed = _cli.build_parser().parse_args(args)
    if parsed.shard is not None:
        assert _cli._parse_shard(_cli.build_parser(), parsed.shard)


def _check_script(script, args):
    assert (ROOT / script).is_file(), script
    proc = subprocess.run([sys.executable, script, '--help'], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    own = args[:args.index('--')] if '--' in args else args
    for option in own:
        if option.startswith('-'):
            assert re.search(r'(?<![\w-]){}(?![\w-])'.format(re.escape(option)),
                             proc.stdout), '{} --help lists no {}'.format(script, option)


def _check_pip_install(args):
    args = [a for a in args if a != '-e']
    assert len(args) == 1, args
    target = re.fullmatch(r'\.(?:\[([\w,-]+)\])?', args[0])
    assert target, 'pip install target {!r}: expected . or ".[extras]"'.format(args[0])
    assert (ROOT / 'pyproject.toml').is_file()
    if target.group(1) and tomllib is not None:
        declared = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project'][
            'optional-dependencies']
        for extra in target.group(1).split(','):
            assert extra in declared, 'extra [{}] is not in pyproject.toml'.format(extra)


def test_readme_tour_prints_what_its_comments_claim():
    text = README.read_text()
    tour = text.split('## A short tour', 1)[1]
    tour = re.search(r'```python\n(.*?)```', tour, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tour, str(README), 'exec'), {})
    printed = [line.strip() for line in out.getvalue().splitlines()]
    claimed = re.findall(r'print\(.*\)\s+#.*?(\[[^\]]*\])\s*$', tour, re.M)
    assert len(printed) == len(claimed) == 4
    for got, want in zip(printed, claimed):
        values = [float(v) for v in want.strip('[]').split(',')]
        numbers = [float(v) for v in re.findall(r'-?\d+\.?\d*(?:e-?\d+)?',
                                                got.split('shape=')[0])]
        assert numbers == values, (got, want)


def test_example_loss_falls_at_every_printed_step():
    """The quick-start example is a clean demonstration: its loss decreases."""
    proc = subprocess.run([sys.executable, 'examples/train_mlp.py'], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    losses = [float(v) for v in re.findall(r'loss ([\d.]+)', proc.stdout)]
    assert len(losses) >= 5
    assert all(b < a for a, b in zip(losses, losses[1:])), losses

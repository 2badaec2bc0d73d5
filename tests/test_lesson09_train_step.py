"""Lesson 09's training-step exercise: the answer passes (with or without zero_grad first), each mistake a learner
makes in the step's order is named, odd return values are told what to return, and ``train.fit(step=)`` trains with
the learner's step exactly as with gpulab's."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest

from gpulab import data, lessons, nn, train
from gpulab.errors import UsageError
from gpulab.lessons import answers_05_10
from kernel_edits import edited_kernel

SRC = textwrap.dedent(inspect.getsource(answers_05_10.train_step))
BACKWARD = next(line + "\n" for line in SRC.splitlines() if "model.backward(" in line)
STEP = "    optimizer.step()  # moves every weight along its gradient\n"


def _step(*edits: tuple[str, str]):
    """The reference step as a learner would write it in the lesson (their own function), with ``edits``."""
    return edited_kernel(SRC, "train_step", {}, *edits)


def test_the_reference_passes_and_a_copy_of_it_with_zero_grad_first_passes():
    assert lessons.exercise("09", "train_step").check(answers_05_10.train_step, trusted=True).passed
    mine = _step(("    logits = model.forward(xb)", "    optimizer.zero_grad()\n    logits = model.forward(xb)"))
    res = lessons.check("09", "train_step", mine)
    assert res.passed, res


@pytest.mark.parametrize(
    ("edits", "words"),
    [
        ([(STEP, "")], "nothing updated them"),
        ([(BACKWARD, ""), (STEP, STEP + BACKWARD)], "optimizer.step() ran before model.backward"),
        ([(BACKWARD, "")], "gradients left over from an earlier batch"),
        ([(STEP, "    optimizer.zero_grad()\n" + STEP)], "the gradients were zeroed between"),
        ([("    return loss, logits", "    return loss * len(yb), logits")], "the batch's sum"),
    ],
)
def test_each_mistake_in_the_step_is_named(edits, words):
    res = lessons.check("09", "train_step", _step(*edits))
    assert not res.passed and words in res.hint, res


@pytest.mark.parametrize(
    ("ret", "words"),
    [
        ("None", "returned None"),
        ("loss", "must return a pair"),
        ("logits, loss", "second result must be the logits"),
        ("loss, logits, logits", "must return a pair"),
    ],
)
def test_a_step_returning_something_else_is_told_what_to_return(ret, words):
    res = lessons.check("09", "train_step", _step(("    return loss, logits", f"    return {ret}")))
    assert not res.passed and words in res.message, res


def test_a_failed_step_falls_back_on_the_reference(capsys):
    wrong = _step((STEP, ""))
    res = lessons.check("09", "train_step", wrong)
    assert lessons.or_reference(res, wrong, "09", "train_step") is answers_05_10.train_step
    assert "has not passed its check yet" in capsys.readouterr().out


def _digits():
    return data.load("digits", size=8).subset(200, 50)


def _model():
    return nn.mnist_cnn(seed=0, image_size=8, channels=(2, 4), hidden=16)


def test_fit_trains_with_the_learners_step_as_with_gpulabs():
    calls = []

    def counting(model, loss_fn, optimizer, xb, yb):
        calls.append(xb.shape[0])
        return answers_05_10.train_step(model, loss_fn, optimizer, xb, yb)

    ds = _digits()
    ours = train.fit(_model(), ds, epochs=2, batch_size=64, progress=False)
    theirs = train.fit(_model(), ds, epochs=2, batch_size=64, progress=False, step=counting)
    assert calls == [64, 64, 64, 8] * 2  # every batch of both epochs went through the learner's step
    assert theirs.train_loss == ours.train_loss and theirs.test_accuracy == ours.test_accuracy


def test_fit_without_an_update_in_the_step_learns_nothing():
    ds = _digits()
    model = _model()
    before = [p.copy() for _, p, _ in model.parameters()]
    train.fit(model, ds, epochs=1, batch_size=64, progress=False, step=_step((STEP, "")))
    assert all(np.array_equal(a, p) for a, (_, p, _) in zip(before, model.parameters()))


@pytest.mark.parametrize(("step", "workers"), [("train_step", 1), (answers_05_10.train_step, 2)])
def test_fit_refuses_a_step_it_cannot_run(step, workers):
    with pytest.raises(UsageError, match="step must be a function"):
        train.fit(_model(), _digits(), epochs=1, progress=False, step=step, workers=workers)


def test_the_lessons_first_loss_is_near_ln_10_as_its_explanation_says():
    """The answer to 'the first batch's loss' is -ln(1/10) for equal logits; the course's untrained CNN starts
    within the 35% the lesson's compare allows."""
    ds = data.load("digits", size=28).subset(64, 8)
    model = nn.mnist_cnn(seed=0, image_size=28, channels=(8, 16), hidden=64)
    loss, _ = answers_05_10.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), ds.x_train, ds.y_train)
    assert abs(loss - np.log(10)) <= 0.35 * loss

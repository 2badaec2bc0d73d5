"""gpulab.viz.training: confusion matrix, learned filters and misclassified images (lesson 09).

The training-curve figures are tested with the training loop in tests/test_train.py."""

import numpy as np
import pytest

from gpulab.viz import confusion_matrix, confusion_matrix_figure, filters_figure, misclassified_figure


def test_confusion_matrix_counts_and_errors():
    m = confusion_matrix([0, 1, 1, 2, 2, 2], [0, 1, 2, 2, 2, 0], 3)
    np.testing.assert_array_equal(m, [[1, 0, 0], [0, 1, 1], [1, 0, 2]])
    assert m.dtype == np.int64
    # column vectors and float labels are accepted as long as they hold class indices
    np.testing.assert_array_equal(confusion_matrix(np.array([[0.0], [1.0]]), np.array([1, 1]), 2), [[0, 1], [0, 1]])
    with pytest.raises(ValueError, match="same length"):
        confusion_matrix([0, 1], [0], 2)
    with pytest.raises(ValueError, match="class indices 0..1"):
        confusion_matrix([0, 2], [0, 1], 2)


def test_confusion_matrix_figure():
    fig = confusion_matrix_figure([0, 1, 1, 2, 2, 2], [0, 1, 2, 2, 2, 0], ["a", "b", "c"], title="Test set")
    assert fig.layout.title.text == "Test set (accuracy 66.67%)"
    assert fig.layout.xaxis.title.text == "predicted class" and fig.layout.yaxis.title.text == "true class"
    np.testing.assert_array_equal(fig.data[0].z, [[1, 0, 0], [0, 1, 1], [1, 0, 2]])


def test_filters_figure():
    w = np.random.default_rng(0).standard_normal((10, 1, 3, 3)).astype(np.float32)
    fig = filters_figure(w)
    assert len(fig.data) == 10
    lim = float(np.abs(w).max())
    assert all(t.zmin == -lim and t.zmax == lim for t in fig.data)  # one shared colour scale
    with pytest.raises(ValueError, match="conv weights"):
        filters_figure(w[0])


def test_misclassified_figure():
    x = np.arange(5 * 16, dtype=np.float32).reshape(5, 1, 4, 4)
    fig = misclassified_figure(x, [0, 1, 2, 3, 4], [0, 2, 2, 1, 4], [str(i) for i in range(5)], n=12)
    assert len(fig.data) == 2 and fig.layout.annotations[0].text == "1 → 2"
    np.testing.assert_array_equal(fig.data[1].z, x[3, 0])  # the second mistake is image 3
    assert len(misclassified_figure(x, [0, 1, 2, 3, 4], [1, 2, 3, 4, 0], n=3).data) == 3
    assert misclassified_figure(x, [0] * 5, [0] * 5).layout.title.text.endswith("none")

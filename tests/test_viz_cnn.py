"""gpulab.viz.cnn: the confusion matrix and the lesson-09 figures."""

import numpy as np
import pytest

from gpulab.viz.cnn import confusion_figure, confusion_matrix, filters_figure, misclassified_figure


def test_confusion_matrix_counts():
    m = confusion_matrix([0, 1, 1, 2, 2, 2], [0, 1, 2, 2, 2, 0], 3)
    np.testing.assert_array_equal(m, [[1, 0, 0], [0, 1, 1], [1, 0, 2]])
    with pytest.raises(ValueError, match="same length"):
        confusion_matrix([0, 1], [0], 2)
    fig = confusion_figure(m, ["a", "b", "c"])
    assert fig.layout.xaxis.title.text == "predicted class"


def test_filters_and_misclassified():
    w = np.random.default_rng(0).standard_normal((10, 1, 3, 3)).astype(np.float32)
    assert len(filters_figure(w).data) == 10
    with pytest.raises(ValueError, match="conv weights"):
        filters_figure(w[0])
    x = np.zeros((5, 1, 4, 4), np.float32)
    fig = misclassified_figure(x, [0, 1, 2, 3, 4], [0, 2, 2, 1, 4], [str(i) for i in range(5)])
    assert len(fig.data) == 2 and fig.layout.annotations[0].text == "1 -> 2"
    assert misclassified_figure(x, [0] * 5, [0] * 5, ["0"]).layout.title.text.endswith("none")

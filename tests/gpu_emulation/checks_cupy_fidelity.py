"""The emulated CuPy does what CuPy 14.2 does (run in emulated gpu mode by tests/test_gpu_emulated.py).

Each check cites the CuPy v14.2.0 source (github.com/cupy/cupy, tag v14.2.0) that it pins; where CuPy accepts
what a stricter stand-in refused, the stand-in must accept it too, or gpu-mode code that works on a GPU would fail
here (and the other way round).
"""

from __future__ import annotations

import cupy
import numpy as np
import pytest

if not getattr(cupy, "EMULATED", False):
    pytest.skip("run in emulated gpu mode (-p gpu_emulation.plugin)", allow_module_level=True)


# --- A2: basic-index assignment goes through fill ------------------------------------------------------------
@pytest.mark.parametrize("key", [Ellipsis, slice(None), slice(0, 2), 0, (None, 0)])
@pytest.mark.parametrize("value", [[1.0, 2.0], (1.0, 2.0), [5.0], np.array([5.0])])
def test_basic_index_assignment_of_a_list_or_numpy_array_raises(key, value):
    # _routines_indexing.pyx _scatter_op (l. 1086-1091): not a CuPy array -> y.fill(value); core.pyx fill
    # (l. 1010-1014): numpy.asarray(value).shape != () -> ValueError
    b = cupy.zeros(4)
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray cannot be used for fill"):
        b[key] = value


def test_basic_index_assignment_of_scalars_and_cupy_arrays_works():
    b = cupy.zeros(4)
    b[0] = np.array(5.0)  # 0-d: core.pyx fill takes value[()]
    b[1] = 6
    b[2:] = cupy.asarray([7.0, 8.0])  # _scatter_op: a CuPy array is copied on the device
    assert b.get().tolist() == [5.0, 6.0, 7.0, 8.0]
    with pytest.raises(ValueError, match="non-scalar cupy.ndarray cannot be used for fill"):
        b.fill(cupy.ones(2))  # core.pyx fill l. 1005-1008


# --- A3: a basic index that picks one element is a 0-d view ---------------------------------------------------
def test_an_element_is_a_0d_view_of_the_array():
    # core.pyx __getitem__ -> _routines_indexing.pyx _ndarray_getitem -> _view_getitem: a view, never a copy
    a = cupy.arange(4.0)
    x = a[0]
    x += 10
    assert a.get().tolist() == [10.0, 1.0, 2.0, 3.0]
    m = cupy.zeros((2, 2))
    y = m[1, 1]
    y += 1
    assert m.get()[1, 1] == 1.0


def test_an_advanced_index_gives_a_new_array():
    # _prepare_slice_list (l. 272-274): "Other array-like (including ()-shaped array) in indices forces to return a
    # new array"
    a = cupy.arange(4.0)
    x = a[cupy.asarray(1)]
    x += 10
    assert a.get().tolist() == [0.0, 1.0, 2.0, 3.0]


# --- A4: functions given Python lists do what CuPy's code does with them --------------------------------------
@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: cupy.sum([1.0, 2.0]), AttributeError),  # _math/sumprod.py l. 42: a.sum(...)
        (lambda: cupy.mean([1.0, 2.0]), AttributeError),  # _statistics/meanvar.py l. 164: a.mean(...)
        (lambda: cupy.amax([1.0, 2.0]), AttributeError),  # _statistics/order.py l. 85: a.max(...)
        (lambda: cupy.max([1.0, 2.0]), AttributeError),  # cupy/__init__.py: amax as max
        (lambda: cupy.bincount([1, 2]), AttributeError),  # _statistics/histogram.py l. 540: x.ndim
        (lambda: cupy.linalg.norm([1.0, 2.0]), AttributeError),  # linalg/_norms.py l. 51: x.dtype
        (lambda: cupy.copyto(cupy.zeros(2), [1.0, 2.0]), AttributeError),  # _manipulation/basic.py l. 60: src.dtype
        (lambda: cupy.full(2, [1.0, 2.0]), AttributeError),  # _creation/basic.py full -> copyto
        (lambda: cupy.array_equal([1.0], cupy.ones(1)), AttributeError),  # _logic/comparison.py l. 60: a1.shape
        (lambda: cupy.matmul(cupy.ones(2), [1.0, 2.0]), TypeError),  # linalg/_product.py: matmul is a _GUFunc
        (lambda: cupy.ones(2) @ np.ones(2), TypeError),
        (lambda: cupy.exp([1.0, 2.0]), TypeError),  # _kernel.pyx _preprocess_arg
        (lambda: cupy.zeros(cupy.asarray(3)), TypeError),  # internal.pyx get_size: no __index__ on ndarray
        (lambda: cupy.ones(2).reshape(cupy.asarray(2)), TypeError),
    ],
)
def test_functions_given_lists_fail_as_cupys_do(call, error):
    with pytest.raises(error):
        call()


def test_norm_of_a_numpy_array_runs_its_default_case():
    # linalg/_norms.py l. 54-66: cupy.sqrt((x * x).sum()); a NumPy array's sum is a NumPy scalar, which cupy.sqrt takes
    r = cupy.linalg.norm(np.array([3.0, 4.0]))
    assert isinstance(r, cupy.ndarray) and float(r) == 5.0


# --- A5: methods have CuPy's signatures ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.item(1),  # core.pyx l. 680: cpdef item(self)
        lambda a: a.sum(where=a > 1),  # core.pyx l. 1391: sum(axis, dtype, out, keepdims)
        lambda a: a.max(initial=0),  # core.pyx l. 1288: max(axis, out, keepdims)
        lambda a: a.min(initial=0),  # core.pyx l. 1317
        lambda a: cupy.sum(a, where=a > 1),  # _math/sumprod.py l. 13
        lambda a: np.max(a, initial=0),  # __array_function__ -> cupy.amax(..., initial=0)
    ],
)
def test_numpy_only_method_arguments_raise_type_error(call):
    with pytest.raises(TypeError):
        call(cupy.arange(4.0))


def test_reductions_keep_cupys_arguments():
    a = cupy.arange(4.0)
    assert cupy.asarray(2.0).item() == 2.0
    with pytest.raises(ValueError):
        a.item()  # core.pyx l. 688: size != 1
    assert a.sum(0, None, None, True).shape == (1,)
    assert int(a.argmax(dtype=np.int32)) == 3  # core.pyx l. 1298: argmax(axis, out, dtype, keepdims)
    assert float(cupy.amax(a, axis=0)) == 3.0


# --- B1: np.allclose / cupy.isclose / cupy.allclose with a NumPy array --------------------------------------------
def test_allclose_and_isclose_accept_numpy_arrays():
    # core.pyx l. 2443 _HANDLED_TYPES = (ndarray, numpy.ndarray): np.allclose(cupy, numpy) runs cupy.allclose;
    # _logic/comparison.py l. 126-127: isclose calls cupy.asanyarray on both
    a, n = cupy.arange(4.0), np.arange(4.0)
    for r in (np.allclose(a, n), np.allclose(n, a), cupy.allclose(a, n), cupy.allclose(a, [0.0, 1.0, 2.0, 3.0])):
        assert isinstance(r, cupy.ndarray) and r.shape == () and r.dtype == np.bool_ and bool(r)
    r = cupy.isclose(a, n)
    assert isinstance(r, cupy.ndarray) and r.get().all()


# --- B2: advanced-index assignment copies NumPy values to the device ---------------------------------------------
@pytest.mark.parametrize(
    "key", [[0, 1], np.array([0, 1]), cupy.asarray([0, 1]), np.array([True, True, False, False]), (0, [0, 1])]
)
def test_advanced_index_assignment_takes_numpy_values(key):
    # _routines_indexing.pyx _scatter_op_single (l. 916-917) / _scatter_op_mask_single (l. 1036): core.array(value)
    b = cupy.zeros(4) if not isinstance(key, tuple) else cupy.zeros((1, 4))
    b[key] = np.array([5.0, 6.0])
    assert b.get().ravel()[:2].tolist() == [5.0, 6.0]
    b[key] = [7.0, 8.0]
    assert b.get().ravel()[:2].tolist() == [7.0, 8.0]


# --- B3: copyto and full take NumPy arrays of size 1 --------------------------------------------------------------
def test_copyto_and_full_take_numpy_arrays_of_one_element():
    # _manipulation/basic.py l. 47-54: a NumPy array of size 1 is a scalar; more raises ValueError
    d = cupy.zeros(3)
    cupy.copyto(d, np.array([2.0]))
    assert d.get().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray cannot be used for copyto"):
        cupy.copyto(d, np.ones(3))
    assert cupy.full(3, np.array(2.0)).get().tolist() == [2.0, 2.0, 2.0]  # _creation/basic.py full -> copyto
    assert cupy.full(2, cupy.asarray(4, dtype=np.int32)).dtype == np.int32


# --- B4: comparisons with a 0-d NumPy array --------------------------------------------------------------------
def test_comparisons_take_a_0d_numpy_array_arithmetic_does_not():
    # core.pyx __richcmp__ l. 1497-1499 and __array_ufunc__ l. 2015-2024: a 0-d numpy.ndarray becomes .item()
    a = cupy.arange(4.0)
    for r in (a < np.array(2.0), np.array(2.0) > a, a == np.array(1.0), np.less(a, np.array(2.0))):
        assert isinstance(r, cupy.ndarray)
    assert (a < np.array(2.0)).get().tolist() == [True, True, False, False]
    with pytest.raises(TypeError, match="Unsupported type"):
        a + np.array(2.0)  # _kernel.pyx _preprocess_arg
    with pytest.raises(TypeError, match="Unsupported type"):
        a < np.ones(4)  # noqa: B015 - the comparison is what raises


# --- B5: cupy.sum / cupy.mean of a NumPy array return NumPy's result -----------------------------------------------
def test_method_calling_functions_return_numpys_result_for_numpy_arrays():
    # _math/sumprod.py l. 42 (a.sum), _statistics/meanvar.py l. 164 (a.mean), order.py l. 85 (a.max)
    n = np.arange(4.0)
    for r in (cupy.sum(n), cupy.mean(n), cupy.amax(n)):
        assert isinstance(r, np.floating)
    assert isinstance(cupy.sum(n, axis=0, keepdims=True), np.ndarray)


# --- B7: numba-cuda's to_device views a CuPy array -------------------------------------------------------------
def test_to_device_of_a_cupy_array_is_a_view():
    # numba-cuda cudadrv/devicearray.py auto_device l. 926-931: __cuda_array_interface__ -> from_cuda_array_interface
    from numba import cuda

    a = cupy.zeros(3, dtype=np.float32)
    d = cuda.to_device(a)
    d[0] = 5.0
    assert a.get()[0] == 5.0
    assert cuda.to_device(d) is d  # auto_device l. 924: device memory is returned as it is
    h = np.zeros(2)
    cuda.to_device(h)[0] = 1.0  # a NumPy array is still copied
    assert h[0] == 0.0


# --- A9: joining arrays takes CuPy arrays only; hstack/vstack copy NumPy values over ---------------------------
@pytest.mark.parametrize("name", ["concatenate", "stack", "column_stack"])
@pytest.mark.parametrize("other", [np.zeros(1), np.bool_(True), 1.0, [1.0]])
def test_joins_refuse_anything_but_cupy_arrays(name, other):
    # _manipulation/join.py l. 165: stack = concatenate([cupy.expand_dims(x, axis) for x in tup]); dims.py l. 150
    # _expand_dims(_ndarray_base a, ...) takes CuPy arrays only; concatenate (l. 64) -> _routines_manipulation.pyx
    # concatenate_method l. 663-672: _preprocess_args ("Unsupported type" for a NumPy array or a list), then "Only
    # cupy arrays can be concatenated" (a scalar); column_stack l. 24-25
    a = cupy.zeros(1) if name != "stack" else cupy.zeros(())
    with pytest.raises(TypeError):
        getattr(cupy, name)([a, other])
    assert getattr(cupy, name)([a, a]).get().size == 2


def test_concatenate_refuses_0d_arrays_with_type_error():
    # _routines_manipulation.pyx l. 675-678: TypeError (NumPy raises ValueError)
    with pytest.raises(TypeError, match="zero-dimensional arrays cannot be concatenated"):
        cupy.concatenate([cupy.zeros(()), cupy.zeros(())])


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack", "atleast_1d", "atleast_2d"])
def test_hstack_vstack_and_atleast_nd_take_numpy_values(name):
    # join.py l. 104 (hstack: cupy.atleast_1d), l. 133 (vstack: atleast_2d), l. 80 (dstack: atleast_3d); dims.py
    # l. 25: _atleast_nd_helper runs cupy.asarray on each, so NumPy arrays, scalars and lists are copied over
    a = cupy.zeros(1)
    parts = [a, np.ones(1), np.float32(2), [3.0]]
    r = getattr(cupy, name)(parts) if "stack" in name else getattr(cupy, name)(*parts)
    for x in r if isinstance(r, (list, tuple)) else [r]:
        assert isinstance(x, cupy.ndarray)


# --- A10: functions typed _ndarray_base, or checking with _util.check_array, take CuPy arrays only ----------------
@pytest.mark.parametrize(
    "call",
    [
        lambda x: cupy.expand_dims(x, 0),  # _manipulation/dims.py l. 150 -> _expand_dims(_ndarray_base a, ...)
        lambda x: cupy.broadcast_to(x, (2,)),  # dims.py l. 131 -> _routines_manipulation.pyx l. 488
        lambda x: cupy.moveaxis(x, 0, 0),  # transpose.py l. 65 -> _routines_manipulation.pyx l. 315
        lambda x: cupy.rollaxis(x, 0),  # transpose.py l. 21 -> _routines_manipulation.pyx l. 335
        lambda x: cupy.all(x),  # _logic/truth.py l. 50: _util.check_array
        lambda x: cupy.any(x),  # _logic/truth.py l. 87
        lambda x: cupy.nonzero(x),  # _sorting/search.py l. 141
        lambda x: cupy.where(x),  # _sorting/search.py l. 205: nonzero(condition)
        lambda x: cupy.dot(cupy.ones(1), x),  # linalg/_product.py l. 100 -> core.pyx l. 2080 dot(self, _ndarray_base b)
        lambda x: cupy.ones(1).dot(x),
    ],
)
@pytest.mark.parametrize("other", [np.ones(1), np.float32(1.0), np.bool_(True), 1.0, [1.0]])
def test_typed_functions_refuse_anything_but_cupy_arrays(call, other):
    with pytest.raises(TypeError):
        call(other)
    call(cupy.ones(1))


# --- A11: functions that call the argument's method: a list or Python scalar has none -----------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda x: cupy.reshape(x, (-1,)),  # _manipulation/shape.py l. 61: a.reshape(...)
        lambda x: cupy.ravel(x),  # shape.py l. 95
        lambda x: cupy.transpose(x),  # transpose.py l. 84
        lambda x: cupy.squeeze(x),  # dims.py l. 169
        lambda x: cupy.clip(x, 0, 1),  # _math/misc.py l. 178
        lambda x: cupy.take(x, 0),  # _indexing/indexing.py l. 30
        lambda x: cupy.repeat(x, 2),  # _manipulation/tiling.py l. 73
        lambda x: cupy.argsort(x),  # _sorting/sort.py l. 114
        lambda x: cupy.where(x, cupy.ones(1), 0.0),  # _sorting/search.py l. 210: condition.astype('?')
        lambda x: cupy.empty_like(x),  # _creation/basic.py l. 103: prototype.dtype
        lambda x: cupy.zeros_like(x, dtype=np.float32),  # basic.py l. 57: a.flags
        lambda x: cupy.full_like(x, 1.0),  # basic.py l. 368
        lambda x: cupy.shares_memory(cupy.ones(1), x),  # _misc/memory_ranges.py l. 24: x.dtype
        lambda x: cupy.lib.stride_tricks.as_strided(x, (1,), (8,)),  # lib/stride_tricks.py l. 41: x.dtype
    ],
)
@pytest.mark.parametrize("other", [1.0, [1.0]])
def test_method_calling_functions_given_lists_raise_attribute_error(call, other):
    with pytest.raises(AttributeError):
        call(other)
    call(cupy.ones(1))


def test_method_calling_functions_give_numpys_result_for_numpy_arrays():
    # the bodies above run NumPy's own method on a NumPy array (no TypeError, NumPy's result), as in CuPy
    n = np.arange(4.0)
    for r in (cupy.reshape(n, (2, 2)), cupy.ravel(n), cupy.transpose(n), cupy.clip(n, 0, 1), cupy.argsort(n)):
        assert type(r) is np.ndarray
    assert isinstance(cupy.empty_like(n), cupy.ndarray)  # basic.py: only its dtype and flags are read


# --- A12: ufunc operands (where's x and y, ndarray.clip's bounds) are CuPy arrays or scalars ----------------------
def test_where_and_clip_refuse_list_operands():
    # _sorting/search.py l. 210: _where_ufunc; core.pyx l. 1356 -> _routines_math.pyx l. 151: the ufunc _clip;
    # _kernel.pyx _preprocess_arg -> _scalar.pyx l. 344 "Unsupported type"
    a = cupy.arange(3.0)
    with pytest.raises(TypeError, match="Unsupported type"):
        cupy.where(a > 1, a, [0.0, 0.0, 0.0])
    with pytest.raises(TypeError, match="Unsupported type"):
        a.clip([0.0, 0.0, 0.0], 1.0)
    assert cupy.where(a > 1, a, np.float32(0)).get().tolist() == [0.0, 0.0, 2.0]
    assert a.clip(None, 1.0).get().tolist() == [0.0, 1.0, 1.0]  # None: the dtype's bound (l. 141-150)

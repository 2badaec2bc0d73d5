"""The PTX tier: every library kernel compiles with NVVM for Turing (7.5) and Hopper (9.0)."""

import pytest

from gpulab import kernels, ptx

NAMES = [name for name, _, _ in kernels.all_ptx_signatures()]


@pytest.fixture(scope="module")
def results():
    return ptx.compile_library()


@pytest.mark.ptx
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cc", ["7.5", "9.0"])
def test_kernel_compiles_to_ptx(results, name, cc):
    assert results[name][cc] == "ok", f"{name} does not compile for sm_{cc.replace('.', '')}: {results[name][cc]}"


def test_every_family_lists_its_kernels():
    assert len(NAMES) == len(set(NAMES))
    assert NAMES, "gpulab.kernels has no kernels to check"


@pytest.mark.ptx
def test_python_only_code_is_rejected_by_the_ptx_tier():
    """The simulator would run this; NVVM must refuse it (a Python list inside a kernel)."""
    source = (
        "from numba import cuda\n"
        "@cuda.jit\n"
        "def bad(out):\n"
        "    i = cuda.grid(1)\n"
        "    xs = [1, 2, 3]\n"
        "    xs.append(i)\n"
        "    out[i] = xs[-1]\n"
    )
    res = ptx.compile_source(source, "bad", "void(float32[:])", ccs=[(7, 5)])
    assert res["7.5"] != "ok"


@pytest.mark.ptx
def test_good_learner_source_compiles():
    source = (
        "from numba import cuda\n"
        "@cuda.jit\n"
        "def double(x):\n"
        "    i = cuda.grid(1)\n"
        "    if i < x.size:\n"
        "        x[i] *= 2\n"
    )
    assert ptx.compile_source(source, "double", "void(float32[:])", ccs=[(7, 5)]) == {"7.5": "ok"}


@pytest.mark.ptx
def test_compile_sources_compiles_for_several_targets_in_one_process():
    def item(name, body):
        source = f"from numba import cuda\n@cuda.jit\ndef {name}(x):\n    i = cuda.grid(1)\n{body}"
        return {"source": source, "name": name, "signature": "void(float32[:])"}

    items = {
        "double": item("double", "    if i < x.size:\n        x[i] *= 2\n"),
        "listy": item("listy", "    xs = [1.0]\n    xs.append(x[i])\n    x[i] = xs[-1]\n"),
    }
    both = ptx.compile_sources(items, ccs=[(7, 5), (9, 0)])
    assert list(both) == [(7, 5), (9, 0)]
    for res in both.values():
        assert res["double"] == "ok" and res["listy"] != "ok", res
    with pytest.raises(TypeError, match="not both"):
        ptx.compile_sources(items, (7, 5), ccs=[(9, 0)])

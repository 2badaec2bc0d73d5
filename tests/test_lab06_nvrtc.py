"""Lab 06's CuPy answers compile to PTX with NVRTC, without a GPU: the solution notebook's ElementwiseKernel and
ReductionKernel specs are placed in the CUDA C that CuPy generates for them (the templates of CuPy's
``_kernel.pyx`` and ``_reduction.pyx``: references to the elements, ``typedef <reduce_type> _type_reduce``,
``REDUCE``/``POST_MAP`` macros, one loop per thread) and compiled with CuPy's headers by NVRTC in a child process.
The same templates show why the model refuses what it refuses: a NumPy name as ``reduce_type``, an input assigned,
a ``;`` in a reduction's expression.

Skipped where CuPy, NVRTC or the CUDA headers are not installed (CuPy comes with the gpu extras).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpulab.lessons.elementwise import params

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "solutions" / "lab06_cupy_interop.ipynb"
C_NAMES = {"float32": "float", "float64": "double", "float16": "float16", "int32": "int"}

_CHILD = textwrap.dedent(
    """
    import json, os, sys
    import cupy
    from cupy.cuda import nvrtc
    here = os.path.dirname(cupy.__file__)
    includes = [os.path.join(here, "_core", "include")]
    try:
        import nvidia.cuda_runtime
        includes.append(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "include"))
    except ImportError:
        pass
    headers = "".join(f"#include <cupy/{h}>\\n" for h in
                      ("carray.cuh", "math_constants.h", "float16.cuh"))
    out = {}
    for key, src in json.load(sys.stdin).items():
        prog = nvrtc.createProgram(headers + src, key + ".cu", [], [])
        try:
            nvrtc.compileProgram(prog, [f"-I{i}" for i in includes] + ["--std=c++17", "-arch=compute_75"])
            out[key] = "ok" if nvrtc.getPTX(prog) else "no PTX"
        except Exception:
            out[key] = nvrtc.getProgramLog(prog)[-1500:]
    print(json.dumps(out))
    """
)


def _nvrtc(sources: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], input=json.dumps(sources), capture_output=True, text=True, timeout=600
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        pytest.skip(f"NVRTC with CuPy's headers is not available here: {proc.stderr.strip()[-300:]}")
    res = json.loads(lines[-1])
    missing = [v for v in res.values() if "cannot open source file" in v]
    if missing:
        pytest.skip(f"CUDA headers for NVRTC are not installed here: {missing[0][:300]}")
    return res


def _spec(name: str) -> dict[str, str]:
    """The dict the solution notebook's function ``name`` returns."""
    for cell in json.loads(LAB.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in src:
            ns: dict = {}
            exec(src, ns)  # noqa: S102 - the repository's own solution cell
            return ns[name]()
    raise AssertionError(f"{LAB.name} defines no {name}")


def _arg(ctype: str, name: str, array: bool, const: bool) -> str:
    c = C_NAMES[ctype]
    return f"{'const ' if const else ''}{f'CArray<{c}, 1, 1, 1> _raw_{name}' if array else f'{c} {name}'}"


def elementwise_source(spec: dict[str, str], arrays: set[str]) -> str:
    """CuPy's ElementwiseKernel code for 1-D arrays (``arrays``: the parameters passed as arrays)."""
    ins, outs = params(spec["in_params"], "in_params"), params(spec["out_params"], "out_params")
    args = [_arg(t, n, n in arrays, True) for t, n in ins] + [_arg(t, n, True, False) for t, n in outs]
    refs = [f"const {C_NAMES[t]} &{n} = _raw_{n}[_ind.get()];" for t, n in ins if n in arrays]
    refs += [f"{C_NAMES[t]} &{n} = _raw_{n}[_ind.get()];" for t, n in outs]
    body = "\n    ".join(refs + [spec["operation"]])
    return (
        f'extern "C" __global__ void {spec["name"]}({", ".join(args + ["CIndexer<1> _ind"])}) {{\n'
        f"  CUPY_FOR(i, _ind.size()) {{\n    _ind.set(i);\n    {body};\n  }}\n}}\n"
    )


def reduction_source(spec: dict[str, str]) -> str:
    """CuPy's ReductionKernel code, one thread's part (its loop, then the post-map), for a 1-D input."""
    ins, outs = params(spec["in_params"], "in_params"), params(spec["out_params"], "out_params")
    args = [_arg(t, n, True, True) for t, n in ins] + [_arg(t, n, True, False) for t, n in outs]
    loads = " ".join(f"const {C_NAMES[t]} {n} = _raw_{n}[_in_ind.get()];" for t, n in ins)
    stores = " ".join(f"{C_NAMES[t]} &{n} = _raw_{n}[_out_ind.get()];" for t, n in outs)
    reduce_type = spec.get("reduce_type") or C_NAMES[outs[0][0]]
    return textwrap.dedent(
        f"""
        #define REDUCE(a, b) ({spec["reduce_expr"]})
        #define POST_MAP(a) ({spec["post_map_expr"]})
        typedef {reduce_type} _type_reduce;
        extern "C" __global__ void {spec["name"]}({", ".join(args)}, CIndexer<1> _in_ind, CIndexer<1> _out_ind) {{
          _type_reduce _s = _type_reduce({spec["identity"]});
          for (ptrdiff_t _j = threadIdx.x; _j < _in_ind.size(); _j += blockDim.x) {{
            _in_ind.set(_j);
            {loads}
            _type_reduce _a = static_cast<_type_reduce>({spec["map_expr"]});
            _s = REDUCE(_s, _a);
          }}
          if (threadIdx.x == 0) {{
            _out_ind.set(0);
            {stores}
            POST_MAP(_s);
          }}
        }}
        """
    )


def test_lab06_cupy_answers_compile_with_nvrtc_and_the_refused_variants_do_not():
    adam, norm = _spec("adam_elementwise_spec"), _spec("grad_norm_spec")
    sources = {
        "adam": elementwise_source(adam, {"g", "p", "m", "v"}),
        "grad_norm": reduction_source(norm),
        "grad_norm_g_times_g": reduction_source({**norm, "map_expr": "g * g"}),  # float16 converts to float
        "numpy_name_as_reduce_type": reduction_source({**norm, "reduce_type": "float32"}),
        "input_assigned": elementwise_source({**adam, "operation": "g = 2 * g;" + adam["operation"]}, {"g", "p"}),
        "semicolon_in_post_map": reduction_source({**norm, "post_map_expr": "norm = sqrtf(a);"}),
    }
    res = _nvrtc(sources)
    assert res["adam"] == "ok" and res["grad_norm"] == "ok" and res["grad_norm_g_times_g"] == "ok", res
    assert "float32" in res["numpy_name_as_reduce_type"], res  # not a C type: the model refuses it the same way
    assert res["input_assigned"] != "ok", res  # in_params are const
    assert res["semicolon_in_post_map"] != "ok", res  # POST_MAP(a) puts it inside parentheses


def test_what_the_model_accepts_since_review_compiles_local_variables_and_half():
    """The model reads a local declaration (`float t = ...;`) and `half` as reduce_type: both are C that CuPy's
    generated code compiles (cuda_fp16.h's half)."""
    adam, norm = _spec("adam_elementwise_spec"), _spec("grad_norm_spec")
    op = (
        "float m1 = beta1 * m + (1.0f - beta1) * g; const float v1 = beta2 * v + (1.0f - beta2) * g * g;"
        "m = m1; v = v1; p -= lr_t * m1 / (sqrtf(v1) + eps);"
    )
    res = _nvrtc(
        {
            "local_variables": elementwise_source({**adam, "operation": op}, {"g", "p", "m", "v"}),
            "half_reduce_type": reduction_source({**norm, "reduce_type": "half"}),
        }
    )
    assert res == {"local_variables": "ok", "half_reduce_type": "ok"}, res


def test_lesson06_raw_kernels_compile_with_nvrtc():
    """Lesson 06's RawKernel ReLU (also lesson 11's, as HIP) and the leaky variant its cell 42 builds by replacing
    one expression: CUDA C that only a GPU compiled so far (the emulated tier cannot run RawKernels)."""
    from gpulab import interop

    cells = json.loads((ROOT / "notebooks" / "06_cupy_interop.ipynb").read_text())["cells"]
    leaky_cell = next(
        "".join(c["source"]) for c in cells if "leaky_src = interop.RELU_RAW_SOURCE" in "".join(c["source"])
    )
    old, new = "x[i] > 0.0f ? x[i] : 0.0f", "x[i] > 0.0f ? x[i] : 0.01f * x[i]"
    assert f'.replace("{old}", "{new}")' in leaky_cell, "lesson 06 builds its leaky RawKernel another way: update"
    leaky = interop.RELU_RAW_SOURCE.replace(old, new)
    assert leaky != interop.RELU_RAW_SOURCE
    res = _nvrtc(
        {"relu_raw": interop.RELU_RAW_SOURCE, "leaky_relu_raw": leaky, "typo": leaky.replace("0.01f", "0.01f x")}
    )
    assert res["relu_raw"] == "ok" and res["leaky_relu_raw"] == "ok", res
    assert res["typo"] != "ok", res  # NVRTC does refuse broken C here

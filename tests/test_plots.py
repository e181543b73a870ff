"""The saved plots are readable: titles inside the image, legends beside (not over) what they
name, every client on the partition plot's axis, and the seeds' spread drawn around a mean."""

import json
import statistics
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection

from graphfed.build import federated_data
from graphfed.config import load_config
from graphfed.data.stats import plot_label_distribution
from graphfed.launch import run
from graphfed.report import load_run, mean_curves, plot_curves
from tests.conftest import require


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def assert_readable(fig) -> None:
    """Everything drawn lies inside the image; no legend covers the axes (``fig`` drawn again
    as it was saved: a closed figure keeps its artists, not its canvas)."""
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    image = fig.bbox
    (ax,) = fig.axes
    title = ax.title.get_window_extent(renderer)
    assert image.x0 <= title.x0 and title.x1 <= image.x1 and title.y1 <= image.y1, "title clipped"
    assert ax.get_legend() is None and fig.legends, "the legend belongs beside the axes"
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        assert not _overlap(box, ax.get_window_extent(renderer)), "legend over the axes"
        assert image.x0 <= box.x0 and box.x1 <= image.x1 and image.y0 <= box.y0


@require("Cora")
def test_every_client_is_named_on_the_partition_plot_and_nothing_is_clipped(tmp_path):
    config = load_config("configs/quickstart.yaml",
                         ["num_clients=30", "partition={name: dirichlet}"])
    data = federated_data(config, 0)
    fig = plot_label_distribution(data, tmp_path / "labels.png")
    assert (tmp_path / "labels.png").stat().st_size > 0
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(c) for c in range(30)]
    assert_readable(fig)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    base = ["rounds=3", "num_clients=3", "eval_every=1"]
    for name, seeds in (("three-seeds", "[0,1,2]"), ("one-seed", "[0]")):
        run(load_config("configs/quickstart.yaml", [*base, f"seeds={seeds}", f"name={name}"]),
            out=out, progress=False)
    return [load_run(out / "three-seeds"), load_run(out / "one-seed")]


@require("Cora")
def test_a_report_curve_is_the_mean_over_seeds_in_a_band_of_their_std(two_runs, tmp_path):
    metric, (many, one) = mean_curves(two_runs)
    assert metric == "test_acc" and many.seeds == 3 and one.seeds == 1
    lines = [[json.loads(line) for line in (Path(two_runs[0]["run_dir"]) / f"seed-{s}"
                                            / "metrics.jsonl").read_text().splitlines()]
             for s in (0, 1, 2)]
    per_seed = [{p["round"]: p["test_acc"] for p in seed if "test_acc" in p} for seed in lines]
    assert many.rounds == sorted(per_seed[0]) and len(many.rounds) >= 3
    for i, values in enumerate(zip(*(s.values() for s in per_seed), strict=True)):
        assert many.means[i] == pytest.approx(statistics.fmean(values))
        assert many.stds[i] == pytest.approx(statistics.pstdev(values))
    assert max(many.stds) > 0 and set(one.stds) == {0.0}
    fig = plot_curves([many, one], ["Cora"], tmp_path / "report.png", metric)
    (ax,) = fig.axes
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1  # the three-seed run's; one seed has no spread to draw
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "three-seeds (3 seeds)", "one-seed (1 seed)"]
    assert_readable(fig)

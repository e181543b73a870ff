"""The ``gpfl-motivation`` preset (GPFL Figs. 1 and 3): its settings and its figures, end to
end."""

import json
import math

from graphfed.reproduce import get_preset
from graphfed.reproduce.papers.gpfl_motivation import accuracy_panels
from tests.conftest import require


def test_the_settings_cross_three_heterogeneities_with_four_client_counts():
    preset = get_preset("gpfl-motivation")
    assert [v.method for v in preset.variants] == ["self-train", "fedavg", "gpfl"]
    assert len(preset.datasets) == 12 and preset.datasets[0] == "NCI1/rate=0.5/k=4"


def test_rows_become_one_curve_per_method_in_each_heterogeneity_panel():
    rows = [{"method": m, "dataset": f"NCI1/rate={r}/k={k}", "metric": "acc",
             "ours_mean": 0.5 + k / 100, "ours_std": None}
            for m in ("fedavg", "gpfl") for r in ("0.5", "0.9") for k in (4, 10)]
    panels = accuracy_panels(rows)
    assert list(panels) == ["homogeneous (rate 0.5)", "highly heterogeneous (rate 0.9)"]
    assert panels["homogeneous (rate 0.5)"]["gpfl"] == [(4, 0.54, 0.0), (10, 0.6, 0.0)]


@require("NCI1")
@require("PROTEINS")
def test_the_preset_runs_and_draws_its_figure(tmp_path):
    from graphfed.reproduce.runner import reproduce

    out, rows, _ = reproduce("gpfl-motivation", methods=["fedavg", "gpfl"],
                             settings=["k=4", "rate=0.9"], seeds=1, out=tmp_path,
                             progress=False, overrides=("dataset=PROTEINS", "rounds=2"))
    assert len(rows) == 2 and all(r["ours_mean"] is not None for r in rows)
    assert (out / "heterogeneity.png").stat().st_size > 0
    assert (out / "similarity-NCI1_rate=0.9_k=4.png").stat().st_size > 0
    found = json.loads((out / "similarity.json").read_text())["NCI1/rate=0.9/k=4"]
    assert all(math.isfinite(found[kind][side]) for kind in ("raw", "marginal")
               for side in ("within", "between"))

"""features=row_normalized: the law of PyG's NormalizeFeatures, on the run's data only."""

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import NormalizeFeatures

from graphfed.build import config_dataset
from graphfed.config import load_config
from graphfed.data.features import normalize_rows
from tests.conftest import require


def test_rows_are_normalised_as_pyg_normalizes_features_negative_values_and_zero_rows_included():
    x = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [-2.0, 0.5, 1.5], [0.1, 0.2, 0.0]])
    expected = NormalizeFeatures()(Data(x=x.clone())).x
    assert torch.allclose(normalize_rows(x), expected)


@require("Cora")
def test_a_run_with_row_normalized_features_sees_rows_summing_to_one_and_the_default_is_untouched():
    plain = config_dataset(load_config("configs/quickstart.yaml", []))
    normed = config_dataset(load_config("configs/quickstart.yaml", ["features=row_normalized"]))
    assert torch.allclose(normed.graph.x.sum(1), torch.ones(plain.graph.num_nodes))
    assert float(plain.graph.x.sum(1).max()) > 1  # bag-of-words counts, as loaded
    assert torch.equal(normed.graph.edge_index, plain.graph.edge_index)

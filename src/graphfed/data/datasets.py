"""Load real benchmark datasets by name through PyTorch Geometric's own dataset classes.

The data root is ``$GRAPHFED_DATA`` and is treated as read-only: PyG writes ``processed/`` next to
``raw/``, so each dataset is processed under the cache directory (``$GRAPHFED_CACHE``, default
``~/.cache/graphfed``) with its ``raw/`` folder linked to the read-only copy, in a folder of its
own for each place and state of those raw files (``graphfed.data.staged``). Without
``GRAPHFED_DATA`` the datasets are downloaded into the cache the way PyG normally does. Either
way, raw files that PyG's reader unpickles are checked first (``_check_pickles``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from filelock import FileLock

from graphfed.data.degree_features import one_hot_degree
from graphfed.data.staged import CHECKSUMS, StagedRaw, is_built, is_public, mark_built
from graphfed.errors import GraphfedError

if TYPE_CHECKING:
    from torch import Tensor
    from torch_geometric.data import Data

Level = Literal["node", "graph"]
Task = Literal["classification", "regression"]


class DatasetError(GraphfedError):
    """An unknown dataset name, or a known one whose files are not present."""


@dataclass(frozen=True)
class DatasetSpec:
    """Where PyG looks for one dataset and how to build it."""

    name: str
    level: Level
    pyg_class: str
    class_root: str
    raw_subdir: str
    raw_files: tuple[str, ...]
    pyg_name: str | None = None
    degree_features: bool = False
    max_degree: int | None = None  # one-hot degree cap; None: the dataset's own max degree
    pickled: tuple[str, ...] = ()  # the raw files PyG's reader unpickles
    reader: str = "torch_geometric.datasets"  # the module that holds ``pyg_class``
    # classification: integer labels, one output per class; regression: one real-valued target
    # per graph (``graphfed.regression``), one output
    task: Task = "classification"
    molecules: bool = False  # items are molecules read from SMILES: rdkit is needed


def _planetoid(name: str) -> DatasetSpec:
    parts = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
    files = tuple(f"ind.{name.lower()}.{p}" for p in parts)
    # PyG reads test.index as text and unpickles the rest
    return DatasetSpec(name, "node", "Planetoid", "Planetoid", f"{name}/raw", files, name,
                       pickled=files[:-1])


def _npz(name: str, cls: str, root: str, sub: str, pyg_name: str, file: str) -> DatasetSpec:
    return DatasetSpec(name, "node", cls, root, f"{sub}/raw", (file,), pyg_name)


def _geom_gcn(name: str, cls: str, sub: str, split_prefix: str) -> DatasetSpec:
    """Actor and WebKB: Pei et al.'s (Geom-GCN) files with their ten 60/20/20 splits."""
    files = ("out1_node_feature_label.txt", "out1_graph_edges.txt",
             *(f"{split_prefix}_split_0.6_0.2_{i}.npz" for i in range(10)))
    return DatasetSpec(name, "node", cls, cls, f"{sub}/raw" if sub else "raw", files,
                       None if cls == "Actor" else name)


def _heterophilous(name: str) -> DatasetSpec:
    """Platonov et al. (ICLR 2023): PyG's ``HeterophilousGraphDataset``, ten 50/25/25 splits."""
    sub = name.lower()
    return DatasetSpec(name, "node", "HeterophilousGraphDataset", "Heterophilous", f"{sub}/raw",
                       (f"{sub}.npz",), name)


def _filtered(name: str) -> DatasetSpec:
    """The same paper's Chameleon and Squirrel with duplicate nodes removed (no PyG class)."""
    sub = f"{name.lower()}_filtered"
    return DatasetSpec(f"{name}-filtered", "node", "FilteredHeterophily", "HeterophilyFiltered",
                       f"{sub}/raw", (f"{sub}.npz",), name, reader="graphfed.data.heterophily")


def _tu(name: str, degree_features: bool = False, max_degree: int | None = None) -> DatasetSpec:
    files = (f"{name}_A.txt", f"{name}_graph_indicator.txt", f"{name}_graph_labels.txt")
    return DatasetSpec(name, "graph", "TUDataset", "TUDataset", f"{name}/raw", files, name,
                       degree_features, max_degree)


_NODE_SPECS = [
    _planetoid("Cora"),
    _planetoid("CiteSeer"),
    _planetoid("PubMed"),
    _npz("Amazon-Photo", "Amazon", "Amazon", "Photo", "Photo", "amazon_electronics_photo.npz"),
    _npz("Amazon-Computers", "Amazon", "Amazon", "Computers", "Computers",
         "amazon_electronics_computers.npz"),
    _npz("Cora_ML", "CitationFull", "CitationFull", "cora_ml", "Cora_ML", "cora_ml.npz"),
    _npz("CoraFull", "CitationFull", "CitationFull", "cora", "Cora", "cora.npz"),
    _npz("DBLP", "CitationFull", "CitationFull", "dblp", "DBLP", "dblp.npz"),
    # CitationFull's CiteSeer (4,230 nodes, 602 features), not Planetoid's 3,327-node CiteSeer
    _npz("CiteSeerFull", "CitationFull", "CitationFull", "citeseer", "CiteSeer", "citeseer.npz"),
    _npz("Coauthor-CS", "Coauthor", "Coauthor", "CS", "CS", "ms_academic_cs.npz"),
    _npz("Coauthor-Physics", "Coauthor", "Coauthor", "Physics", "Physics",
         "ms_academic_phy.npz"),
    # heterophilous graphs, each with its published splits (``GraphDataset.splits``)
    _heterophilous("Minesweeper"),
    _heterophilous("Tolokers"),
    _geom_gcn("Actor", "Actor", "", "film"),
    *(_geom_gcn(n, "WebKB", n.lower(), n.lower()) for n in ("Texas", "Cornell", "Wisconsin")),
    _filtered("Chameleon"),
    _filtered("Squirrel"),
    DatasetSpec("WikiCS", "node", "WikiCS", "WikiCS", "raw", ("data.json",)),
    DatasetSpec("Flickr", "node", "Flickr", "Flickr", "raw",
                ("adj_full.npz", "feats.npy", "class_map.json", "role.json")),
]
_GRAPH_SPECS = [
    _tu(n)
    for n in ("PROTEINS", "NCI1", "DD", "MUTAG", "ENZYMES", "PTC_MR", "AIDS", "BZR", "COX2",
              "DHFR", "Letter-low", "Letter-med", "Letter-high")
] + [
    _tu("IMDB-BINARY", degree_features=True),
    _tu("IMDB-MULTI", degree_features=True),
    # Degrees reach 3,062: the generic OneHotDegree(max degree) of the GCFL/FedStar/GPFL code
    # (none of which featurises REDDIT-BINARY itself) would take 10.5 GB. Capped at 135, the width
    # that code gives IMDB-BINARY, so both social datasets fit one input layer; about 0.1 % of the
    # nodes have a larger degree and share the last column.
    _tu("REDDIT-BINARY", degree_features=True, max_degree=135),
    # MoleculeNet's ESOL (Delaney): 1,128 molecules, their measured log solubility in mol/L.
    # Node features: PyG's 9 categorical atom descriptors one-hot encoded (``_one_hot_atoms``);
    # the 3 bond features are not read
    DatasetSpec("ESOL", "graph", "MoleculeNet", "MoleculeNet", "esol/raw",
                ("delaney-processed.csv",), "ESOL", task="regression", molecules=True),
]

SPECS: dict[str, DatasetSpec] = {s.name: s for s in _NODE_SPECS + _GRAPH_SPECS}
SYNTHETIC = ("csbm",)


@dataclass
class GraphDataset:
    """A loaded dataset: one graph (node level) or a list of graphs (graph level)."""

    name: str
    level: Level
    num_features: int
    num_classes: int  # the model's outputs: 1 for a regression target
    graph: Data | None = None
    graphs: list[Data] = field(default_factory=list)
    # a node dataset's published splits: train, val and test masks of N x (number of splits)
    splits: tuple[Tensor, Tensor, Tensor] | None = None
    task: Task = "classification"

    def __repr__(self) -> str:
        size = f"{self.graph.num_nodes} nodes" if self.graph is not None else (
            f"{len(self.graphs)} graphs")
        targets = "a real target" if self.task == "regression" else f"{self.num_classes} classes"
        return (f"GraphDataset({self.name}, {self.level}, {size}, "
                f"{self.num_features} features, {targets})")


def _key(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def canonical_name(name: str) -> str:
    """Resolve ``name`` ignoring case and ``_``/``-``; raise a DatasetError listing valid names."""
    lookup = {_key(n): n for n in available()}
    if _key(name) not in lookup:
        raise DatasetError(f"unknown dataset {name!r}; available: {', '.join(available())}")
    return lookup[_key(name)]


def dataset_level(name: str) -> Level:
    canonical = canonical_name(name)
    return "node" if canonical in SYNTHETIC else SPECS[canonical].level


def dataset_task(name: str) -> Task:
    """What ``name``'s targets are: class labels or one real value per graph."""
    canonical = canonical_name(name)
    return "classification" if canonical in SYNTHETIC else SPECS[canonical].task


def require_rdkit(what: str) -> None:
    """Raise one ``DatasetError`` saying how to install rdkit when it is missing: ``what``
    needs it to read molecules from SMILES."""
    import importlib

    try:
        importlib.import_module("rdkit.Chem")
    except ImportError:
        raise DatasetError(f"{what} needs rdkit to read molecules from SMILES; install it with "
                           "pip install 'graphfed[chem]'") from None


def molecule_smiles(name: str) -> list[str]:
    """The SMILES string of every molecule of dataset ``name``, in the dataset's order."""
    spec = SPECS[canonical_name(name)]
    if not spec.molecules:
        raise DatasetError(f"dataset '{spec.name}' holds no molecules (no SMILES); molecular "
                           f"datasets: {', '.join(n for n, s in SPECS.items() if s.molecules)}")
    return [str(g.smiles).strip() for g in _load_pyg(spec)]


def available() -> list[str]:
    """Every dataset name graphfed knows, present or not."""
    return [*SPECS, *SYNTHETIC]


def data_root() -> Path | None:
    root = os.environ.get("GRAPHFED_DATA")
    return Path(root).expanduser().resolve() if root else None


def cache_dir() -> Path:
    return Path(os.environ.get("GRAPHFED_CACHE", "~/.cache/graphfed")).expanduser().resolve()


def missing_files(name: str) -> list[str]:
    """The raw files of ``name`` absent from ``$GRAPHFED_DATA`` (empty when all present)."""
    spec = SPECS[canonical_name(name)]
    root = data_root()
    if root is None:
        return []
    raw = root / spec.class_root / spec.raw_subdir
    return [str(raw / f) for f in spec.raw_files if not (raw / f).exists()]


def is_present(name: str) -> bool:
    canonical = canonical_name(name)
    return canonical in SYNTHETIC or (data_root() is not None and not missing_files(canonical))


def unwritable_cache(what: str, error: OSError) -> DatasetError:
    """The one error for a cache folder that cannot be made or written."""
    return DatasetError(f"{what} cannot be cached: {error.filename}: {error.strerror}; point "
                        f"GRAPHFED_CACHE at a writable folder (now {cache_dir()})")


def save_to_cache(obj: Any, path: Path, what: str) -> None:
    """``torch.save`` ``obj`` to ``path`` in the cache atomically (a temporary file renamed into
    place), so a reader never sees half a file; an unwritable cache is one ``DatasetError``."""
    import torch

    tmp = path.with_suffix(f".tmp{os.getpid()}")
    # saved through a Python file: torch.save given a path reports an unwritable one as a
    # RuntimeError, not an OSError
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            torch.save(obj, f)
        tmp.replace(path)
    except OSError as e:
        raise unwritable_cache(what, e) from None


def _pyg_root(spec: DatasetSpec) -> tuple[Path, StagedRaw | None]:
    """A writable root for PyG and, with a data root, the staged raw files its raw folder links
    to: one root per place and fingerprint of those files (``staged``), so a cache never
    outlives the files it was built from."""
    root = data_root()
    if root is None:
        return cache_dir() / "downloads" / spec.class_root, None
    missing = missing_files(spec.name)
    if missing:
        present = [n for n in SPECS if not missing_files(n)]
        raise DatasetError(
            f"dataset '{spec.name}' is not present under GRAPHFED_DATA={root} "
            f"(missing {', '.join(missing)}); present: {', '.join(present) or 'none'}"
        )
    import torch_geometric  # torch and PyG load only when data does: listing stays instant

    staged = StagedRaw(spec.name, root, root / spec.class_root / spec.raw_subdir)
    work = (cache_dir() / f"pyg-{torch_geometric.__version__}" / spec.class_root
            / f"{spec.name}-{staged.key()}")
    return work, staged


def _build_once(work: Path, spec: DatasetSpec, staged: StagedRaw | None,
                load: Callable[[], Any]) -> Any:
    """``load()`` the dataset in ``work``; the first time for these raw files, verify them and
    link them in first, and mark the folder built after."""
    if staged is None or is_built(work):
        return _load_plain(work, load)
    checked = staged.verify()
    link = work / spec.raw_subdir
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".raw-{os.getpid()}")
        tmp.symlink_to(staged.raw, target_is_directory=True)
        tmp.replace(link)
    dataset = _load_plain(work, load)
    mark_built(work, staged, checked)
    return dataset


def _load_plain(work: Path, load: Callable[[], Any]) -> Any:
    """``load()`` once every processed file under ``work`` proved to hold only tensors and PyG's
    graph containers. PyG's reader (``torch_geometric.io.fs.torch_load``) tries the safe,
    tensors-only unpickler and, when that refuses a class, warns and falls back to full
    unpickling, which would run a crafted processed file's code. Checked here first with the
    safe unpickler, such a file is refused instead; allowing the graph containers for PyG's own
    read makes that read succeed without its fallback. graphfed itself never unpickles
    without the restriction."""
    import torch

    from graphfed.serialization import graph_classes, safe_load

    allowed = graph_classes()
    for path in sorted(work.rglob("processed/*.pt")):
        safe_load(path, "processed dataset file", allowed,
                  remedy=f"delete {path.parent.parent} to rebuild it from the raw files")
    with torch.serialization.safe_globals(allowed):
        return load()


def _check_pickles(spec: DatasetSpec, raw: Path) -> None:
    """Let PyG unpickle only raw files that are the public ones or that the restricted unpickler
    read without refusing anything: unpickling a crafted file runs its code, whatever the data
    root and whether or not a SHA256SUMS there lists it."""
    from graphfed.data.safe_pickle import check_pickle

    folder = raw.resolve()  # through the cache's link: the data root's folder, named in errors
    for name in spec.pickled:
        path = folder / name  # by its own name: the table knows the file by it
        if not is_public(path):
            check_pickle(path, spec.name)


def _guarded(cls: Any, spec: DatasetSpec) -> Any:
    """PyG's dataset class with ``_check_pickles`` run at the start of its ``process``, the one
    step that reads raw files, whether they were staged under the data root or just
    downloaded into the cache."""
    if not spec.pickled or not isinstance(cls, type):  # a stand-in that is no class reads nothing
        return cls

    def process(self: Any) -> None:
        _check_pickles(spec, Path(self.raw_dir))
        cls.process(self)

    return type(cls.__name__, (cls,), {"process": process})


def _load_pyg(spec: DatasetSpec):
    import importlib

    if spec.molecules:
        require_rdkit(f"dataset '{spec.name}'")
    cls = _guarded(getattr(importlib.import_module(spec.reader), spec.pyg_class), spec)
    work, staged = cache_dir(), None
    try:
        work, staged = _pyg_root(spec)
        args = (str(work),) if spec.pyg_name is None else (str(work), spec.pyg_name)
        # PyG writes its processed files on first load: a second process (a parallel run, a
        # Flower worker) must wait for them instead of reading them half-written
        work.mkdir(parents=True, exist_ok=True)
        with FileLock(work / f".{spec.name}.lock"):
            return _build_once(work, spec, staged, lambda: cls(*args))
    except GraphfedError:
        raise
    except OSError as e:  # an unwritable cache, no network for a download, unreadable files
        if staged is not None and Path(e.filename or "/").is_relative_to(cache_dir()):
            raise unwritable_cache(f"dataset '{spec.name}'", e) from None
        raise DatasetError(
            f"dataset '{spec.name}' could not be fetched or read under {work} "
            f"({type(e).__name__}: {e}); stage its raw files under GRAPHFED_DATA "
            f"(graphfed datasets lists what is found there) or check the network and the "
            f"cache's permissions") from None
    except Exception as e:
        # PyG reading a damaged file fails with whatever its parser meets first
        # (UnpicklingError, ValueError, IndexError, ...)
        detail = f"{type(e).__name__}: {str(e).strip()[:160]}"
        if staged is not None and not is_built(work):
            raise DatasetError(
                f"dataset '{spec.name}': its raw files in {staged.raw} could not be processed "
                f"({detail}); they look damaged: restore them from the copy GRAPHFED_DATA was "
                f"made from (a {CHECKSUMS} file beside them lets graphfed name the bad one)"
            ) from None
        raise DatasetError(
            f"dataset '{spec.name}' could not be read from {work} ({detail}); delete that "
            f"folder to rebuild it") from None


def _published_splits(graph: Data) -> tuple[Tensor, Tensor, Tensor] | None:
    """The train/val/test masks of a dataset that publishes several splits (one column each),
    as booleans; None for a dataset with one split or none (Planetoid's single public split is
    not what graphfed's partitions use)."""
    masks = [getattr(graph, f"{split}_mask", None) for split in ("train", "val", "test")]
    if any(m is None or m.dim() != 2 for m in masks):
        return None
    train, val, test = (m.bool() for m in masks)
    return train, val, test


def _one_hot_atoms(x: Tensor) -> Tensor:
    """PyG's 9 atom descriptors (atomic number, chirality, degree, formal charge, hydrogens,
    radical electrons, hybridisation, aromaticity, ring membership; each an index into the
    value list ``torch_geometric.utils.smiles.x_map`` keeps for it) one-hot encoded, each over
    its whole list, 177 columns in all: codes, not quantities (atomic number 8 is no
    "more" than 6), and the same columns for every molecular dataset."""
    import torch
    from torch_geometric.utils.smiles import x_map

    return torch.cat([torch.nn.functional.one_hot(x[:, i], len(values))
                      for i, values in enumerate(x_map.values())], dim=1).float()


def load_dataset(name: str, options: dict | None = None) -> GraphDataset:
    """Load a dataset by name (case-insensitive). ``options`` configure synthetic datasets."""
    import torch
    from torch_geometric.data import Data

    canonical = canonical_name(name)
    if canonical == "csbm":
        from graphfed.data.synthetic import CSBMOptions, contextual_sbm

        opts = CSBMOptions(**(options or {}))
        graph = contextual_sbm(opts)
        return GraphDataset("csbm", "node", graph.num_features, opts.classes, graph=graph)
    spec = SPECS[canonical]
    dataset = _load_pyg(spec)
    if spec.level == "node":
        loaded = dataset[0]
        graph = Data(x=loaded.x.float(), edge_index=loaded.edge_index, y=loaded.y.view(-1))
        return GraphDataset(canonical, "node", graph.num_features, int(graph.y.max()) + 1,
                            graph=graph, splits=_published_splits(loaded))
    if spec.task == "regression":
        graphs = [Data(x=_one_hot_atoms(g.x), edge_index=g.edge_index,
                       y=g.y.view(-1).float(), num_nodes=g.num_nodes) for g in dataset]
        return GraphDataset(canonical, "graph", graphs[0].num_features, 1, graphs=graphs,
                            task="regression")
    graphs = [Data(x=g.x, edge_index=g.edge_index, y=g.y.view(-1), num_nodes=g.num_nodes)
              for g in dataset]
    if spec.degree_features or graphs[0].x is None:
        graphs = one_hot_degree(graphs, spec.max_degree)
    num_classes = int(torch.cat([g.y for g in graphs]).max()) + 1
    return GraphDataset(canonical, "graph", graphs[0].num_features, num_classes, graphs=graphs)

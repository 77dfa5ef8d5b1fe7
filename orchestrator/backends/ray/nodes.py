"""The cluster's nodes as the driver sees them: Ray's node table read into what placement needs."""
from __future__ import annotations

from dataclasses import dataclass

ACCELERATOR_LABEL = "accelerator-type"  # the node label `--accelerator-type` matches (ray start --labels)


def alive_nodes(ray) -> list[dict]:
    return [entry for entry in ray.nodes() if entry.get("Alive")]


@dataclass
class Node:
    node_id: str
    address: str
    gpus: int
    accelerator: str | None  # the accelerator-type label, else Ray's accelerator_type resource
    running: int = 0  # cells of this run on it now
    gpu_running: int = 0

    @property
    def short(self) -> str:
        return f"{self.address}/{self.node_id[:6]}"


def node_table(alive: list[dict], known: dict[str, Node]) -> dict[str, Node]:
    """Node id -> Node for the nodes alive now; a node already `known` keeps its count of this run's cells."""
    table = {}
    for entry in alive:
        resources = entry.get("Resources") or {}
        labels = entry.get("Labels") or {}
        accelerator = labels.get(ACCELERATOR_LABEL) or next(
            (name.split(":", 1)[1] for name in resources if name.startswith("accelerator_type:")), None)
        node_id = entry["NodeID"]
        before = known.get(node_id)
        table[node_id] = Node(node_id, entry.get("NodeManagerAddress", "?"), int(resources.get("GPU", 0)),
                              accelerator, before.running if before else 0, before.gpu_running if before else 0)
    return table

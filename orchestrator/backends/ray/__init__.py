"""The Ray backend: every cell a Ray task on a node of a cluster, run there by the node's own backend.

The driver (this process) connects to a cluster (`--ray-address HOST:PORT`) or starts a local Ray
instance bound to 127.0.0.1, and hands each cell to a node as a Ray task; the task runs the Docker
backend on that node (the node's own engine, the image by tag and digest from `--registry`), or the
local backend (`--node-backend local`), and sends back plain values (the result's JSON, the cell's
log, a few facts), which the driver checks and writes into the run folder as they arrive. Ray is an
optional extra (`pip install -e ".[ray]"`), imported only when `--backend ray` is asked for.

The modules, by where their code runs:
  - connect.py: on the driver, before anything runs: importing Ray, checking `--ray-address`, the
    token-mode rule, starting or connecting (the registry's factory);
  - driver.py: on the driver: RayBackend and its dispatch (placement, retries, gather, cancel);
  - nodes.py: on the driver: Ray's node table as placement reads it;
  - node.py: inside the Ray task on a node: running one cell, installing a dataset, cleaning up;
  - answer.py: the contract between the two: what a node hands back, and the driver's checking of
    it (a node's answer is untrusted data: docs/RUN-GUARANTEES.md, the trust model).
Nothing is imported here, so that a node importing node.py never imports the driver's modules.
"""

"""The scaffold every workload file shares, written once: the contract between a model and its runtime.

A workload file (`workloads/<workload>/<framework>.py`) keeps what readers compare: the model, its
loss and optimizer, its canonical-weight mapping and its MATCHED notes. What every file used to
repeat around them (select the device, load the data inside the data_load phase, build the model
inside the model_build phase, start it from the canonical weights, hand it to the runtime's loop;
and the parity check's own build, load and steps) is `Implementation.run` and `.parity` here.

The contract is one class per workload kind, which each runtime subclasses once
(`workloads/runtime/<framework>.py`: `Training`, `FeatureExtraction`) and each workload file once
more:

    class CNNWorkload(runtime.Training):
        def build_model(self, run, policy): ...             # the model, on the policy's device
        def load_canonical(self, model, params): ...        # canonical arrays -> this framework's
        def make_optimizer(self, model, run, policy): ...   # where the runtime asks for one
        def loss_function(self): ...
    IMPLEMENTATION = CNNWorkload()
    run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls

Required of the workload file: `build_model` and `load_canonical`, and what its runtime's classes
declare abstract besides (`TrainingWithLoss`'s make_optimizer and loss_function, CNTK's learner...).
Required of the runtime: `select_device` (which declares the device sync, `run.declare_sync`: what
the harness's clocks wait for, docs/FAIRNESS.md: explicit-sync) and the loops (`train` and `parity_steps`, or `extract`
and `parity_features`). Every other step is a hook with a default below; a workload file that
needs another overrides it in plain sight (e.g. `build_parity_model` for a model built without
dropout, or `select_device` for a GRU that refuses channels_last). tests/test_scaffold.py checks
that no workload file defines a method the contract does not know (a misspelt hook never runs).

Standard library only, and Python 3.6 compatible: the CNTK images import it.
"""
import abc

from workloads.common import declaration


class Implementation(abc.ABC):
    """One workload in one framework: the steps its scaffold (`run`, `parity`) calls, in order."""

    # --- the runtime's part -----------------------------------------------------------------------

    @abc.abstractmethod
    def select_device(self, run):
        """The framework's device policy (a harness.Policy); raises Unsupported before any work.
        Declares the device sync (`run.declare_sync(wait, waits_for)`), `harness.no_wait` where the
        framework's calls return finished, with the reason (docs/FAIRNESS.md: explicit-sync)."""

    def device_policy(self, run):
        """`select_device`, then the contract's check: it declared the device sync."""
        policy = self.select_device(run)
        if run.sync_waits_for is None:
            raise TypeError("{}.select_device declared no device sync: call run.declare_sync(wait, waits_for) "
                            "(docs/FAIRNESS.md: explicit-sync)".format(type(self).__name__))
        return policy

    # --- the workload file's part -----------------------------------------------------------------

    @abc.abstractmethod
    def build_model(self, run, policy):
        """The model from `run.settings` (never a literal), on the policy's device, in its layout."""

    @abc.abstractmethod
    def load_canonical(self, model, params):
        """Load the canonical arrays (workloads/common/canonical.py) into `model`, in place."""

    # --- hooks with a default ---------------------------------------------------------------------

    def build_parity_model(self, run, policy, batch):
        """The model the parity check loads and runs on `batch`: `build_model`'s. A framework whose
        parity steps cannot switch dropout off by mode builds it without dropout here, and one whose
        graph is bound to a batch size binds it to the parity batch's."""
        return self.build_model(run, policy)

    def start_from_initial_weights(self, run, model):
        """The same start in every framework (docs/FAIRNESS.md: same-start): the canonical weights
        unless --init framework keeps the framework's own initialisers. Inside model_build."""
        weights = run.initial_weights()
        if weights is not None:
            self.load_canonical(model, weights)

    @abc.abstractmethod
    def load_data(self, run):
        """What the workload reads (the training set, or the images to extract features from)."""

    @abc.abstractmethod
    def run(self, run):
        """The benchmark cell."""

    @abc.abstractmethod
    def parity(self, run, params, batch):
        """The parity check: the declared parity outputs of the model on the canonical weights."""


class Training(Implementation):
    """A training workload (the CNN, the GRU): train every epoch, then evaluate the test set."""

    def load_data(self, run):
        """The workload's declared dataset (workloads/<workload>/__init__.py), as numpy arrays."""
        dataset = declaration.get(run.cell.workload).dataset
        loaders = {"cifar10": run.load_cifar10, "imdb": run.load_imdb}
        if dataset not in loaders:
            raise ValueError("no loader for dataset {!r} (workload {})".format(dataset, run.cell.workload))
        return loaders[dataset]()

    def make_optimizer(self, model, run, policy):
        """The optimizer (docs/FAIRNESS.md: fused-optimizers), made inside model_build once the
        model holds its starting weights. None where the model already holds it: Keras' compile(),
        the update operators of a Caffe2 training net, MXNet Module's init_optimizer; a runtime
        whose loop takes one declares it abstract again, so its workload files must give it."""
        return None

    @abc.abstractmethod
    def train(self, run, policy, model, optimizer, data):
        """The runtime's loop: every epoch (workloads/common/loop.py, train), then the test set."""

    @abc.abstractmethod
    def parity_steps(self, run, policy, model, optimizer, batch):
        """The runtime's parity loop: the logits, then the logits after canonical.PARITY_STEPS steps."""

    def run(self, run):
        policy = self.device_policy(run)
        with run.phase("data_load"):
            data = self.load_data(run)
        with run.phase("model_build"):
            model = self.build_model(run, policy)
            self.start_from_initial_weights(run, model)
            optimizer = self.make_optimizer(model, run, policy)
        self.train(run, policy, model, optimizer, data)

    def parity(self, run, params, batch):
        policy = self.device_policy(run)
        model = self.build_parity_model(run, policy, batch)
        self.load_canonical(model, params)
        return self.parity_steps(run, policy, model, self.make_optimizer(model, run, policy), batch)


class TrainingWithLoss(Training):
    """A training workload whose runtime's loop takes the model, its optimizer and its loss function
    (PyTorch, TensorFlow, Chainer, Paddle, MindSpore, MXNet's Gluon): the workload file gives both."""

    @abc.abstractmethod
    def make_optimizer(self, model, run, policy):
        """The optimizer over the model's parameters (docs/FAIRNESS.md: fused-optimizers)."""

    @abc.abstractmethod
    def loss_function(self):
        """The loss on the logits, the batch mean (softmax folded into it: docs/FAIRNESS.md, softmax-in-loss)."""


class FeatureExtraction(Implementation):
    """An inference workload (ResNet-50): the warm pass, then the timed forward-only pass."""

    def load_data(self, run):
        """Random images (seed 0): weights and pixel values do not change the timing."""
        return run.random_images()

    @abc.abstractmethod
    def extract(self, run, policy, model, images):
        """The runtime's loop: workloads/common/loop.py, infer (eval mode, no gradients)."""

    @abc.abstractmethod
    def parity_features(self, run, policy, model, batch):
        """The features of the parity batch."""

    def run(self, run):
        policy = self.device_policy(run)
        with run.phase("data_load"):
            images = self.load_data(run)
        with run.phase("model_build"):
            model = self.build_model(run, policy)
            self.start_from_initial_weights(run, model)
        self.extract(run, policy, model, images)

    def parity(self, run, params, batch):
        policy = self.device_policy(run)
        model = self.build_parity_model(run, policy, batch)
        self.load_canonical(model, params)
        return self.parity_features(run, policy, model, batch)

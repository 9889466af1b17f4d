"""What a step is: the sources that end one (vramscope.step(), the optimizer, evaluation loops,
generate() calls) and the one ranking that says which of them count."""

from __future__ import annotations

import enum
import weakref
from typing import Any, Callable

from . import torch_hooks
from .say import warn


class StepUnit(enum.Enum):
    """What one step of a capture is, named by the source that ends it: (rank, the unit's name, which
    the step marker carries into the trace and the report says "per ..."). The policy: the strongest
    source seen owns the steps; once it has ended one, a weaker source never ends a step (sources
    of one rank all do: a predict() after an evaluate()). So an explicit vramscope.step() beats the
    optimizer, the optimizer beats the evaluation batches run inside training, and these the
    generate() calls a Seq2Seq evaluation makes in each batch. A weaker source's ends are units
    inside the step instead (analysis/within_step.h), ranked the same way among themselves: the
    evaluation batches run between two optimizer steps, not the generate() calls inside them (and
    never the optimizer's, inside explicit steps: its backwards' ends are the microbatches)."""

    explicit = (4, "vramscope.step()")
    optimizer = (3, "optimizer step")
    eval_batch = (2, "eval batch")
    predict_batch = (2, "predict batch")
    validation_batch = (2, "validation batch")
    test_batch = (2, "test batch")
    generate_call = (1, "generate() call")

    def __init__(self, rank: int, spelling: str):
        self.rank = rank
        self.spelling = spelling


class StepSource:
    """The step ends of one capture: each source's hook says its unit ended, the ranking passes the
    ones that are steps to `end_step`. It runs inside the run's own loops, so it never raises: a
    fault goes to `step_aside`."""

    def __init__(self, end_step: Callable[[StepUnit], None], step_aside: Callable[[str], None],
                 optimizer_steps: bool = True, end_unit: Callable[[StepUnit], None] | None = None):
        self._end_step = end_step
        self._end_unit = end_unit
        self._step_aside = step_aside
        # The strongest step source seen; without optimizer_steps, vramscope.step() only.
        self.owner: StepUnit | None = None if optimizer_steps else StepUnit.explicit
        self.unit_owner: StepUnit | None = None  # the strongest of the weaker sources seen since
        # The optimizer whose steps count (a weak reference) and the ids of the parameters it steps:
        # the first one seen, until one over the same parameters replaces it (OptimizerRole).
        self._role = OptimizerRole()

    def install(self) -> list[Callable[[], None]]:
        """Hooks the optimizer and, when (if) the run imports their framework, the loops without one;
        returns what undoes each hook."""
        undo = [torch_hooks.on_optimizer_step(self._on_optimizer_step)]
        if self.owner is StepUnit.explicit:
            return undo  # nothing else can end a step
        ended = self.ended

        def cannot_follow(why: str) -> None:
            warn(f"{why}; those loops' batches will not be steps")

        return undo + [
            torch_hooks.on_trainer_batches(lambda: ended(StepUnit.eval_batch), lambda: ended(StepUnit.predict_batch),
                                           cannot_follow),
            torch_hooks.on_generate(lambda: ended(StepUnit.generate_call), cannot_follow),
            torch_hooks.on_lightning_batches(lambda: ended(StepUnit.validation_batch),
                                             lambda: ended(StepUnit.test_batch),
                                             lambda: ended(StepUnit.predict_batch), cannot_follow),
        ]

    def ended(self, unit: StepUnit) -> None:
        """A source says a step of its unit ended: the ranking decides whether it is one, or a unit
        inside the step."""
        try:
            if self.owner is not None and unit.rank < self.owner.rank:
                return self._unit_ended(unit)
            if unit is not self.owner:
                self.unit_owner = None
            self.owner = unit
            self._end_step(unit)
        except Exception as e:
            self._step_aside(f"capture stopped at a step end ({type(e).__name__}: {e})")

    def _unit_ended(self, unit: StepUnit) -> None:
        # An optimizer step inside an explicit step is no unit: its backwards' ends are the microbatches.
        if self._end_unit is None or unit is StepUnit.optimizer or (
                self.unit_owner is not None and unit.rank < self.unit_owner.rank):
            return
        self.unit_owner = unit
        self._end_unit(unit)

    def _on_optimizer_step(self, optimizer: Any) -> None:
        try:
            ends = self._role.ends_step(optimizer)
        except Exception as e:
            return self._step_aside(f"capture stopped at an optimizer step ({type(e).__name__}: {e})")
        if ends:
            self.ended(StepUnit.optimizer)


class OptimizerRole:
    """Which optimizer's steps end steps when several step. The first seen, as in a trace
    (analysis/steps.h FirstOptimizer: by its annotation's name, which a rebuilt optimizer keeps). Live,
    each optimizer is an object of its own, so a replaced one hands its role on: an optimizer that
    steps any parameter the one in the role steps (an optimizer rebuilt every round, a curriculum's,
    one made anew after a parameter change) takes the role, as does any once the role's holder is
    gone. Optimizers over other parameters (a GAN's generator beside its discriminator) step within
    the role holder's steps and end none."""

    def __init__(self) -> None:
        self._holder: weakref.ref[Any] | None = None
        self._parameters: set[int] = set()
        # optimizer -> whether it steps the holder's parameters
        self._replaces: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    def ends_step(self, optimizer: Any) -> bool:
        holder = self._holder() if self._holder is not None else None
        if holder is optimizer:
            return True
        if holder is not None:
            replaces = self._replaces.get(optimizer)
            if replaces is None:
                replaces = self._replaces[optimizer] = not self._parameters.isdisjoint(_parameter_ids(optimizer))
            if not replaces:
                return False
        self._holder = weakref.ref(optimizer)
        self._parameters = _parameter_ids(optimizer)
        self._replaces = weakref.WeakKeyDictionary()
        return True


def _parameter_ids(optimizer: Any) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}

"""This rank's part of a model, for the parallel sizes a user asks for (vLLM's flag names):

    --tensor-parallel-size N      every layer split over N ranks             tinyinfer/parallel.py
    --enable-expert-parallel      with it, MoE experts placed whole on ranks  tinyinfer/expert_parallel.py
    --pipeline-parallel-size N    the layers split over N stages            tinyinfer/pipeline.py

The job must have exactly tensor x pipeline parallel size processes (`mpirun -n`), else a clear error on every
rank. Both together: rank r is tensor-parallel rank r mod tp of stage r // tp, and sends to the same-numbered
rank of the next stage:

    mpirun -n 4 ... --tensor-parallel-size 2 --pipeline-parallel-size 2
        stage 0: ranks 0, 1 (layers 0 .. L/2 - 1, heads split)  --send-->  stage 1: ranks 2, 3
"""

from __future__ import annotations

from tinyinfer.distributed import Communicator
from tinyinfer.errors import TinyInferError
from tinyinfer.expert_parallel import ExpertParallelModel
from tinyinfer.model import Model
from tinyinfer.parallel import TensorParallelModel
from tinyinfer.pipeline import pipeline_stage


def distribute(model: Model, comm: Communicator, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
               enable_expert_parallel: bool = False) -> Model:
    """This rank's part of `model` (the model itself when there is one rank)."""
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    comm.check_size(tp * pp, f"--tensor-parallel-size {tp} x --pipeline-parallel-size {pp}")
    if enable_expert_parallel and tp == 1:
        raise TinyInferError("--enable-expert-parallel places the experts over the tensor-parallel ranks: give "
                             "--tensor-parallel-size N > 1 too")
    stage, t = divmod(comm.rank, tp)  # rank = stage x tp + t: stage's tensor-parallel rank t
    group = comm if pp == 1 else comm.split(color=stage, key=t)  # the ranks of this stage
    if enable_expert_parallel:
        model = ExpertParallelModel(model, group)
    elif tp > 1:
        model = TensorParallelModel(model, group)
    if pp == 1:
        return model
    return pipeline_stage(model, comm if tp == 1 else comm.split(color=t, key=stage))  # rank t of every stage


def traffic_report(model, comm: Communicator) -> str:
    """What this rank handed each operation so far, per token, next to the formula of its split (chapter 14)."""
    formula = model.traffic_formula()
    tokens = max(model.tokens, 1)
    lines = [f"[rank {comm.rank} of {comm.size}, {model.tokens} tokens through the model, {model.rows} logits rows]"]
    for op in sorted(set(comm.stats.calls) | set(formula)):
        measured = comm.stats.bytes[op]
        expected, text = formula.get(op, (0, "no formula: not part of the split"))
        lines.append(f"  {op:>10}: {comm.stats.calls[op]:5d} calls {measured:12,d} B = {measured / tokens:10,.0f} B/token"
                     f" | formula {text} = {expected:,.0f} B")
    return "\n".join(lines)

"""Whether this CPU runs a model's recurrent layers at the run's precision.

Under `trainer.precision=bf16-mixed` torch hands an unpacked LSTM to oneDNN in bfloat16, and on a
CPU without native bfloat16 (AVX2 only: no AVX512-BF16 or AMX) oneDNN has no kernel for it: the
run died at its first batch with "could not create a primitive descriptor for the LSTM forward
propagation primitive". Which CPUs can is not told by torch's CPU capability (oneDNN decides on
its own, and `ONEDNN_MAX_CPU_ISA` caps it), so it is probed: a tiny layer of each recurrent kind
the model holds runs one forward at that precision, once per process. A precision the CPU cannot
run is refused before training, with what to use instead.
"""

import functools

import torch
from torch import nn

from attnexp.errors import ConfigError

BF16_PRECISIONS = ("bf16-mixed", "bf16-true")  # as Lightning names them (trainer.precision)


@functools.cache
def runs_in_bf16(layer: type[nn.RNNBase], mixed: bool) -> bool:
    """Whether a tiny `layer` runs a forward pass in bfloat16 on this CPU: under autocast
    (`mixed`, as bf16-mixed runs it), or with bfloat16 weights and inputs (bf16-true)."""
    module, inputs = layer(4, 4, batch_first=True), torch.zeros(1, 2, 4)
    try:
        if mixed:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                module(inputs)
        else:
            with torch.no_grad():
                module.to(torch.bfloat16)(inputs.to(torch.bfloat16))
    except RuntimeError:  # oneDNN: "could not create a primitive descriptor ..."
        return False
    return True


def check_cpu_kernels(precision: object, model: nn.Module, setting: str) -> None:
    """Refuses a bfloat16 `precision` for a model on the CPU whose recurrent layers this CPU
    cannot run in bfloat16 (`setting`: the config key of the precision)."""
    if str(precision) not in BF16_PRECISIONS:
        return
    kinds = {type(m) for m in model.modules() if isinstance(m, nn.RNNBase)}
    for layer in sorted(kinds, key=lambda kind: kind.__name__):
        if not runs_in_bf16(layer, mixed=str(precision) == "bf16-mixed"):
            raise ConfigError(
                f"{setting}={precision}: this CPU (torch's CPU capability "
                f"{torch.backends.cpu.get_cpu_capability()}) has no bfloat16 {layer.__name__} "
                f"kernel (oneDNN needs native bfloat16: AVX512-BF16 or AMX), and the model has "
                f"{layer.__name__} layers: set {setting}=32-true, or run on a GPU (trainer=gpu)"
            )

"""Weight initialisers chosen by name from the config."""

import torch
from torch import nn

# "torch": torch's defaults (Kaiming-uniform weights, uniform biases, both +-1/sqrt(fan_in)).
# "xavier": Xavier-uniform weights and zero biases, the default of Paddle's (and Keras') dense layers.
LINEAR_INITS = ("torch", "xavier")


def init_linear_layers(module: nn.Module, scheme: str) -> None:
    """Initialise every `nn.Linear` inside `module` by `scheme`.

    A layer that computes several projections in one matrix declares it with a `fused_parts`
    attribute (MHSA's query, key and value: 3); each part is then initialised as a layer of its
    own, as if the projections were separate layers.
    """
    if scheme not in LINEAR_INITS:
        raise ValueError(f"linear_init='{scheme}' is not one of {', '.join(LINEAR_INITS)}")
    if scheme == "torch":
        return
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                for part in layer.weight.chunk(getattr(layer, "fused_parts", 1)):
                    nn.init.xavier_uniform_(part)
                if layer.bias is not None:
                    layer.bias.zero_()

"""NeuMF, the neural collaborative filtering model of the papers' MovieLens-20M benchmark.

Where from: He et al., "Neural Collaborative Filtering" (WWW 2017): a generalised matrix
factorisation branch (GMF: the element-wise product of a user and an item embedding) and an MLP
branch (the concatenated user and item embeddings through a tower of Linear-ReLU layers), fused
by one linear layer into a logit. The DEFT/MiCRO/ExDyna releases use NVIDIA's MLPerf NeuMF with
64 predictive factors, MLP layers 256-256-128-64 and dropout 0.5: 31,832,577 parameters with
MovieLens-20M's 138,493 users and 26,744 items.

Dropout placement: after the ReLU of every hidden MLP layer, as in that NeuMF (its `dropout`
argument: 0 disables it). The embeddings and the GMF branch have none.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

EMBEDDING_STD = 0.01  # the paper's and NVIDIA's initialisation of all four embeddings


class NeuMF(nn.Module):
    """GMF and MLP branches over separate embeddings, fused by Linear(factors + last MLP width, 1)."""

    def __init__(
        self, num_users: int, num_items: int, factors: int = 64, mlp_layers: Sequence[int] = (256, 256, 128, 64), dropout: float = 0.5
    ) -> None:
        super().__init__()
        mlp_layers = list(mlp_layers)
        if len(mlp_layers) < 2 or mlp_layers[0] % 2:
            raise ValueError(
                f"mlp_layers must start with an even width (half of it embeds the user, half the item) "
                f"and have at least two entries, got {mlp_layers}"
            )
        self.gmf_user = nn.Embedding(num_users, factors)
        self.gmf_item = nn.Embedding(num_items, factors)
        self.mlp_user = nn.Embedding(num_users, mlp_layers[0] // 2)
        self.mlp_item = nn.Embedding(num_items, mlp_layers[0] // 2)
        tower: list[nn.Module] = []
        for width_in, width_out in zip(mlp_layers[:-1], mlp_layers[1:]):
            tower += [nn.Linear(width_in, width_out), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        self.mlp = nn.Sequential(*tower)
        self.predict = nn.Linear(factors + mlp_layers[-1], 1)
        self._init_weights()

    def _init_weights(self) -> None:
        for embedding in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(embedding.weight, std=EMBEDDING_STD)
        # Weights as NVIDIA's NeuMF: Glorot uniform in the tower, LeCun uniform for the output
        # layer; biases keep PyTorch's default there too.
        for layer in self.mlp:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
        bound = math.sqrt(3.0 / self.predict.in_features)
        nn.init.uniform_(self.predict.weight, -bound, bound)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """users, items: int64 [B] -> logits [B] (apply a sigmoid for probabilities)."""
        gmf = self.gmf_user(users) * self.gmf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=1))
        return self.predict(torch.cat([gmf, mlp], dim=1)).squeeze(-1)

"""The papers' word-level LSTM language model for WikiText-2.

Where from: the "medium/large" LSTM of Zaremba et al. ("Recurrent Neural Network
Regularization", 2014) with the output embedding tied to the input one (Press & Wolf, "Using the
Output Embedding to Improve Language Models", 2017; Inan et al. 2017), as PyTorch's
word_language_model example builds it. The DEFT/MiCRO/ExDyna releases train it on WikiText-2
with the settings ACCORDION's code names (emsize = nhid = 650, nlayers 3, dropout 0.4, tied),
from the PowerSGD task code they all build on.

Parameters with a vocabulary of V tokens: V * 650 (embedding = decoder weight, counted once)
+ V (decoder bias) + 3 * 4 * (650 * 650 * 2 + 2 * 650) (LSTM) = 651 * V + 10,155,600; the
release's V = 28,869 gives 28,949,319.
"""
from __future__ import annotations

import torch
from torch import nn

Hidden = tuple[torch.Tensor, torch.Tensor]  # (h, c), each [layers, batch, hidden]
INIT_RANGE = 0.1  # uniform embedding initialisation of the PyTorch example


class LSTMLanguageModel(nn.Module):
    """Embedding -> dropout -> stacked LSTM (dropout between layers) -> dropout -> decoder."""

    def __init__(self, vocab_size: int, hidden: int = 650, layers: int = 3, dropout: float = 0.4, tie_weights: bool = True) -> None:
        super().__init__()
        self.hidden = hidden
        self.layers = layers
        self.drop = nn.Dropout(dropout)
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers, dropout=dropout)
        self.decoder = nn.Linear(hidden, vocab_size)
        nn.init.uniform_(self.embedding.weight, -INIT_RANGE, INIT_RANGE)
        nn.init.zeros_(self.decoder.bias)
        if tie_weights:
            # One [V, hidden] matrix serves both ends: `parameters()` yields it once, so it is
            # one gradient, exchanged once. Tying needs the embedding as wide as the LSTM output.
            self.decoder.weight = self.embedding.weight
        else:
            nn.init.uniform_(self.decoder.weight, -INIT_RANGE, INIT_RANGE)

    def init_hidden(self, batch_size: int, device: torch.device | str | None = None) -> Hidden:
        """The zero state a new pass over the text starts from."""
        shape = (self.layers, batch_size, self.hidden)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def forward(self, tokens: torch.Tensor, hidden: Hidden | None = None) -> tuple[torch.Tensor, Hidden]:
        """tokens [seq_len, batch] -> logits [seq_len, batch, vocab_size] and the new state."""
        if hidden is None:
            hidden = self.init_hidden(tokens.shape[1], tokens.device)
        output, hidden = self.lstm(self.drop(self.embedding(tokens)), hidden)
        return self.decoder(self.drop(output)), hidden
